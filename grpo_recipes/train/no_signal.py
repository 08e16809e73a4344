"""A warning after `grpo.no_signal_warning` logged steps in a row with `frac_reward_zero_std` = 1 (no
gradient), naming the likely cause from the step's metrics."""

from __future__ import annotations

import logging

from transformers import TrainerCallback

log = logging.getLogger(__name__)


def likely_cause(logs: dict[str, float], max_completion_length: int | None) -> str:
    accuracies = [v for k, v in logs.items() if k.startswith("accuracy/") and isinstance(v, (int, float))]
    clipped = logs.get("completions/clipped_ratio", 0.0) or 0.0
    if clipped >= 0.5:
        return (
            f"{clipped:.0%} of completions were cut off at max_completion_length={max_completion_length}: "
            "the answers need more tokens (raise grpo.max_completion_length)"
        )
    if accuracies and max(accuracies) == 0.0:
        return (
            "no completion was correct: the task is too hard for the model as it is (an easier task config, "
            "or a larger grpo.num_generations for more chances of a correct one)"
        )
    if accuracies and min(accuracies) == 1.0:
        return "every completion was correct: the task is too easy (a harder task config)"
    return "the rewards cannot vary for these completions: check each reward's options and weight"


class NoSignalWarning(TrainerCallback):
    streak, warned = 0, False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not args.no_signal_warning or not logs or "frac_reward_zero_std" not in logs:  # 0: off
            return
        self.streak = self.streak + 1 if logs["frac_reward_zero_std"] >= 1.0 else 0
        if self.streak >= args.no_signal_warning and not self.warned and state.is_world_process_zero:
            self.warned = True
            log.warning(
                f"No learning signal for {self.streak} steps in a row (step {state.global_step}): every "
                "prompt group's completions got the same reward, so GRPO had no gradient. Likely cause: "
                f"{likely_cause(logs, args.max_completion_length)}"
            )
