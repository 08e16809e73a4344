"""Hydra finds sweepers only in the `hydra_plugins` namespace: this is the recipe's, Optuna's sweeper
with a study that resumes (the logic lives in grpo_recipes/outputs/search.py). Without hydra-optuna-sweeper
installed (pip install -e '.[optuna]') this module defines nothing, and Hydra's own sweeper stays."""

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # the optional extra is not installed: hparams_search= says so (preflight.py)
    OptunaSweeper = None

if OptunaSweeper is not None:

    class ResumableOptunaSweeper(OptunaSweeper):
        """OptunaSweeper whose stored study continues where an interrupted search stopped."""

        def sweep(self, arguments):
            from grpo_recipes.outputs.search import prepare_study

            # OptunaSweeper keeps its settings on `self.sweeper` (an OptunaSweeperImpl, public attributes);
            # the study is read before the stock sweep loop asks it for trials.
            prepare_study(self.sweeper)
            return super().sweep(arguments)
