"""The fixed evaluation alone (`eval_only=true`), on a checkpoint or a base model: the same problems
and the same JSON as a training run's evals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_recipes.train.assemble import Setup
from grpo_recipes.train.trainer import describe, make_evaluator


def model_step(model_path: str) -> int:
    """The training step a saved model was taken at (its trainer_state.json); 0 for a base model."""
    from transformers import TrainerState

    state = Path(model_path).expanduser() / "trainer_state.json"
    return TrainerState.load_from_json(str(state)).global_step if state.is_file() else 0


def eval_only(cfg: dict[str, Any], run_dir: Path, s: Setup) -> float:
    """The fixed evaluation alone, on a checkpoint or a base model: same problems, same JSON."""
    from accelerate import Accelerator

    from grpo_recipes.outputs.logs import append_metrics
    from grpo_recipes.outputs.report import write_report
    from grpo_recipes.train.fast_paths import generate_with_cached_casts

    # The precision training would use (the Trainer wraps forward in bf16 autocast when bf16 is on),
    # so that eval_only on a checkpoint reproduces that run's eval exactly.
    mixed = "bf16" if s.args.bf16 else ("fp16" if s.args.fp16 else "no")
    accelerator = Accelerator(cpu=not s.hw.gpu, mixed_precision=mixed)
    describe(cfg, run_dir, s, accelerator)
    model = accelerator.prepare_model(s.model, evaluation_mode=True).eval()
    if s.args.fast_paths is not False:  # as training generated its evals
        generate_with_cached_casts(model, accelerator)
    step = model_step(cfg["model"]["path"])
    metrics, _ = make_evaluator(cfg, s).run(model, accelerator, step, run_dir / "eval_results")
    if accelerator.is_main_process:
        append_metrics(run_dir / "metrics.jsonl", step, {f"eval_{k}": v for k, v in metrics.items()})
        write_report(run_dir)
    return float(metrics[cfg["optimized_metric"]])


def finished_objective(run_dir: Path, metric: str) -> float:
    """A finished run's objective, read back from its last fixed eval (a search that resumes)."""
    from grpo_recipes.outputs.report import load_evals

    evals = load_evals(run_dir)
    return float(evals[max(evals)]["metrics"][metric]) if evals else 0.0
