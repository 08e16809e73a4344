"""When training runs the fixed evaluation (evaluator.py): at step 0 (before any update), every
`eval.every_n_steps` steps and at the end of training, each step once (a resumed run reads its earlier
evals back instead of repeating them). The metrics go out as `eval_<name>` through the trainer's
callbacks, which every tracker shows as `eval/<name>`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from grpo_recipes.evaluation.evaluator import FixedEvaluator


class FixedEvalCallback(TrainerCallback):
    """Runs the FixedEvaluator at step 0, every N steps and at the end of training.

    It gets what it needs from its constructor (the accelerator, a function that sends `eval_` logs
    to every tracker, when to skip the final eval) and the model from the callback arguments; it does
    not hold the trainer."""

    def __init__(
        self,
        evaluator: FixedEvaluator,
        output_dir: str | Path,
        every_n_steps: int,
        accelerator,
        send_logs: Callable[[dict[str, float], Any], None],
        skip_final_eval: Callable[[], bool] = lambda: False,
        vllm_generator: Callable[[Any], Any] | None = None,
    ):
        self.evaluator = evaluator
        # use_vllm: model -> a generator on the trainer's vLLM engine (generation.VLLMGenerator); else HF
        self.vllm_generator = vllm_generator
        self.dir = Path(output_dir) / "eval_results"
        self.every = every_n_steps  # 0: only at step 0 and at the end
        self.accelerator = accelerator
        self.send_logs = send_logs
        self.skip_final_eval = skip_final_eval  # e.g. a stop on a signal: the resumed run evaluates instead
        self.history: dict[int, dict[str, float]] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        # A resumed run keeps its earlier evals (read back for the summary) and runs none twice.
        for path in self.dir.glob("eval_step_*.json"):
            step = int(path.stem.rsplit("_", 1)[1])
            if step <= state.global_step:
                self.history[step] = json.loads(path.read_text())["metrics"]
        if state.global_step == 0 and 0 not in self.history:
            self.evaluate(model, state, args)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # The last step is evaluated here, before the trackers' own on_train_end closes them.
        last = state.max_steps and state.global_step >= state.max_steps
        if (self.every and state.global_step % self.every == 0) or last:
            self.evaluate(model, state, args)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if state.global_step not in self.history and not self.skip_final_eval():  # stopped early
            self.evaluate(model, state, args)

    def evaluate(self, model, state, args) -> dict[str, float]:
        was_training = model.training
        model.eval()
        try:
            with self._generator(model, args) as generator:
                metrics, _ = self.evaluator.run(generator, self.accelerator, state.global_step, self.dir)
        finally:
            model.train(was_training)
        self.history[state.global_step] = metrics
        # `eval_` names: trackers and metrics.jsonl show them as eval/<name>
        self.send_logs({f"eval_{k}": v for k, v in metrics.items()}, state)
        return metrics

    def _generator(self, model, args):
        """What the eval generates with, as a context manager."""
        if self.vllm_generator is not None:  # vLLM holds its own copy of the weights: no gather here
            return contextlib.nullcontext(self.vllm_generator(model))
        from trl.models import unwrap_model_for_generation

        # Under DeepSpeed the engine gathers ZeRO-3 shards for generation; elsewhere the model itself.
        engine = getattr(self.accelerator, "deepspeed_engine_wrapped", None)
        return unwrap_model_for_generation(  # as GRPOTrainer generates: the user's ZeRO-3 and checkpointing
            engine.engine if engine is not None else model,
            self.accelerator,
            gather_deepspeed3_params=args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
        )
