"""When training runs the fixed evaluation: at step 0, every `eval.every_n_steps` steps and at the end, each
step once (a resumed run reads its earlier evals back); each eval after the first is checked for reward
hacking (console.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


class FixedEvalCallback(TrainerCallback):
    """`skip_final_eval`: not at the end (a stop on a signal: the resumed run does); `vllm_generator`
    (use_vllm): a generator on the trainer's vLLM engine, else the eval generates with transformers."""

    def __init__(
        self,
        evaluator,
        output_dir: str | Path,
        accelerator,
        send_logs: Callable[[dict[str, float], Any], None],
        skip_final_eval: Callable[[], bool] = lambda: False,
        vllm_generator: Callable[[Any], Any] | None = None,
    ):
        self.evaluator, self.vllm_generator, self.output_dir = evaluator, vllm_generator, Path(output_dir)
        self.every = evaluator.settings["every_n_steps"]  # 0: only at step 0 and at the end
        self.accelerator, self.send_logs, self.skip_final_eval = accelerator, send_logs, skip_final_eval
        self.history: dict[int, dict[str, float]] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from grpo_recipes.outputs.logs import load_evals

        for step, ev in load_evals(self.output_dir).items():  # a resumed run's evals up to its checkpoint
            if step <= state.global_step:
                self.history[step] = ev["metrics"]
        if state.global_step == 0 and 0 not in self.history:
            self.evaluate(model, state, args, last=False)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # The last step is evaluated here, before the trackers' own on_train_end closes them.
        last = bool(state.max_steps and state.global_step >= state.max_steps)
        if (self.every and state.global_step % self.every == 0) or last:
            self.evaluate(model, state, args, last=last)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if state.global_step not in self.history and not self.skip_final_eval():  # stopped early
            self.evaluate(model, state, args, last=True)

    def evaluate(self, model, state, args, last: bool) -> None:
        step, earlier, out_dir = state.global_step, dict(self.history), self.output_dir / "eval_results"
        chance = earlier[min(earlier)].get("chance/accuracy") if earlier else None
        was_training = model.training
        model.eval()
        with self._generator(model, args) as generator:
            metrics, _ = self.evaluator.run(
                generator, self.accelerator, step, out_dir, first=not earlier, last=last, chance=chance
            )
        model.train(was_training)
        if earlier:  # the rewards logged so far (a resumed run's log history is its checkpoint's)
            from grpo_recipes.evaluation.console import check_hacking, record_hacking, train_rewards
            from grpo_recipes.outputs.logs import eval_file

            rewards, previous = train_rewards(state.log_history), max(earlier)
            window, drop = (self.evaluator.settings[k] for k in ("hacking_window", "hacking_drop"))
            before = earlier[previous]["accuracy"]
            check = check_hacking(rewards, step, previous, before, metrics["accuracy"], window, drop)
            metrics["reward_hacking"] = int(check is not None and check["raised"])
            if state.is_world_process_zero:
                record_hacking(eval_file(out_dir, step), check)
        self.history[step] = metrics
        self.send_logs({f"eval_{k}": v for k, v in metrics.items()}, state)

    def _generator(self, model, args):
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
