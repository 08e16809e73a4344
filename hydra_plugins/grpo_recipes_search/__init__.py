"""Hydra finds sweepers only in the `hydra_plugins` namespace: this is the recipe's, Optuna's sweeper with a
study that resumes (prepare_study in grpo_recipes/outputs/sweep.py). Without hydra-optuna-sweeper installed
(pip install -e '.[optuna]') it defines nothing, and Hydra's own sweeper stays."""

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # the optional extra is not installed: hparams_search= says so (preflight.py)
    pass
else:

    class ResumableOptunaSweeper(OptunaSweeper):
        def sweep(self, arguments):
            from grpo_recipes.outputs.sweep import prepare_study

            prepare_study(self.sweeper)  # OptunaSweeper's settings (OptunaSweeperImpl), before its loop
            return super().sweep(arguments)
