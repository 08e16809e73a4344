"""What a run writes: logs, metrics, the report, sweep summaries and searches."""

from hydra.experimental.callback import Callback


class SweepSummaryCallback(Callback):
    """Writes the sweep summary when a multirun ends. Hydra builds it for every run: hence no imports here."""

    def on_multirun_end(self, config, **kwargs) -> None:
        from pathlib import Path

        from grpo_recipes.outputs.sweep import summarize_sweep

        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            print(f"Sweep summary: {summarize_sweep(sweep_dir)}")
