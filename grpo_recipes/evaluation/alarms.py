"""The reward-hacking alarm: the train reward rising while the fixed-eval accuracy falls means the policy
found a way to be paid that is not the task (README, "What the model wrote"). Checked at each fixed eval
after the first (callback.py), recorded in that eval's JSON and listed by report.md."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean
from typing import Any


@dataclass(frozen=True)
class HackingCheck:
    step: int
    previous_step: int
    reward_before: float  # mean train reward over the window before the previous eval (or the first window)
    reward_now: float  # ... over the last window logged before this eval
    accuracy_before: float  # the previous eval's fixed-eval accuracy
    accuracy_now: float
    window: int
    drop: float
    first_window: bool  # nothing was logged before the previous eval: the first window stands in

    @property
    def raised(self) -> bool:
        return self.reward_now > self.reward_before and self.accuracy_before - self.accuracy_now > self.drop

    def message(self) -> str:
        before = "the first steps" if self.first_window else f"before step {self.previous_step}'s eval"
        return (
            f"reward hacking? the mean train reward over eval.hacking_window={self.window} logged steps rose "
            f"{self.reward_before:.3f} ({before}) -> {self.reward_now:.3f} (before step {self.step}'s eval) "
            f"while fixed-eval accuracy fell {self.accuracy_before:.3f} (step {self.previous_step}) -> "
            f"{self.accuracy_now:.3f} (step {self.step}), by more than eval.hacking_drop={self.drop:g}"
        )


def train_rewards(log_history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(step, mean train reward) of every logged train step (TRL logs it as `reward`)."""
    return [
        (int(h["step"]), float(h["reward"]))
        for h in log_history
        if isinstance(h.get("reward"), (int, float)) and math.isfinite(h["reward"]) and "step" in h
    ]


def check_hacking(
    rewards: list[tuple[int, float]],
    step: int,
    previous_step: int,
    accuracy_before: float,
    accuracy_now: float,
    window: int,
    drop: float,
) -> HackingCheck | None:
    """Compare the last `window` logged rewards up to `step` with the `window` logged before
    `previous_step` (none before it, at step 0: the first `window`); None when nothing is logged."""
    logged = [r for s, r in sorted(rewards) if s <= step]
    if not logged:
        return None
    before = [r for s, r in sorted(rewards) if s < previous_step][-window:]
    first_window = not before
    before = before or logged[:window]
    now = logged[-window:]
    rewards_seen = fmean(before), fmean(now)
    return HackingCheck(
        step, previous_step, *rewards_seen, accuracy_before, accuracy_now, window, drop, first_window
    )


def record(eval_file: Path, check: HackingCheck | None) -> None:
    """Add the check to its eval's JSON (`reward_hacking`: the numbers and `raised`; the metric too)."""
    from grpo_recipes.outputs.logs import write_atomic

    if not eval_file.is_file():
        return
    result = json.loads(eval_file.read_text())
    result["metrics"]["reward_hacking"] = int(check is not None and check.raised)
    if check is not None:
        result["reward_hacking"] = {**asdict(check), "raised": check.raised}
    write_atomic(eval_file, json.dumps(result, indent=1))
