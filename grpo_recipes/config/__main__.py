"""`python -m grpo_recipes.config` prints the README's "Config reference" table from the declarations."""

from grpo_recipes.config.knobs import knob_table

print(knob_table())
