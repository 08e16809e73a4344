"""`python -m grpo_recipes.config` prints the README's "Config reference" table from the declarations
(tests/test_extending.py keeps the README's copy equal to it)."""

import dataclasses

from grpo_recipes.config.knobs import KNOBS, TRL_DEFAULT
from grpo_recipes.config.values import show


def knob_table() -> str:
    """The README's config table: every declared knob, its default, what it accepts, and its doc."""
    rows = ["| knob | default | accepts | resume may change | what it does |", "|---|---|---|---|---|"]
    for key, f in KNOBS.items():
        value = f.default_factory() if f.default is dataclasses.MISSING else f.default
        shown = "TRL's" if value is TRL_DEFAULT else f"`{show(value)}`"
        accepts = f.metadata["accepts"].describe().replace("|", "\\|")
        resume = "yes" if f.metadata["resume"] else ""
        rows.append(f"| `{key}` | {shown} | {accepts} | {resume} | {f.metadata['doc'].replace('|', '/')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(knob_table())
