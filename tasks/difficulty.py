"""Adaptive difficulty: a level per task (its reasoning-gym curriculum's global level), following the task's
rolling training accuracy (`LevelController`), fed by the accuracy reward (`VerdictRecorder`)."""

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reasoning_gym.factory import create_curriculum, has_curriculum

from tasks.registry import MANAGED_KEYS, registered

Verdict = tuple[str, int, bool]  # (task, level the problem was drawn at, correct)


def top_level(task: str) -> int | None:
    """The highest level of `task`'s curriculum (its longest attribute's last level); None: no curriculum."""
    registered(task)  # ours register on first use
    if not has_curriculum(task):
        return None
    return max(len(attr.levels) for attr in create_curriculum(task).attributes.values()) - 1


def config_at(task: str, level: int, config: Mapping[str, Any]) -> dict[str, Any]:
    """`task`'s config at `level`: its curriculum's attributes over `config` (seed and size: the recipe's)."""
    registered(task)
    curriculum = create_curriculum(task)
    curriculum.set_global_level(level)
    generated = curriculum.generate_configuration(defaults=dict(config))
    if hasattr(generated, "validate"):
        generated.validate()
    fields = [f.name for f in dataclasses.fields(generated) if f.init and f.name not in MANAGED_KEYS]
    return {name: getattr(generated, name) for name in fields}


class LevelController:
    """Each task's level from its accuracy over the last `window` verdicts at that level: a full window at
    >= `raise_at` moves it one level up, below `lower_at` one down, and starts empty at the new level."""

    def __init__(self, top_levels: Mapping[str, int], start_level=0, raise_at=0.7, lower_at=0.3, window=64):
        self.top_levels = dict(top_levels)
        self.raise_at, self.lower_at, self.window = raise_at, lower_at, window
        self.levels = {task: min(start_level, top) for task, top in self.top_levels.items()}
        self.windows = {task: deque(maxlen=window) for task in self.top_levels}

    def observe(self, verdicts: Iterable[Verdict]) -> dict[str, int]:
        """Count `verdicts` in order; return {task: new level} for every task whose level changed."""
        changed = {}
        for task, level, correct in verdicts:
            if self.levels.get(task) != level:
                continue  # a task without a curriculum, or a problem drawn at another level
            recent = self.windows[task]
            recent.append(bool(correct))
            if len(recent) < self.window:
                continue
            accuracy = sum(recent) / len(recent)
            if accuracy >= self.raise_at and level < self.top_levels[task]:
                changed[task] = self.levels[task] = level + 1
            elif accuracy < self.lower_at and level > 0:
                changed[task] = self.levels[task] = level - 1
            else:
                continue
            recent.clear()
        return changed

    def state(self) -> dict[str, Any]:  # JSON-able: a resume continues exactly
        return {"levels": dict(self.levels), "windows": {t: list(w) for t, w in self.windows.items()}}

    def load_state(self, state: Mapping[str, Any]) -> None:
        for task, level in state.get("levels", {}).items():
            if task in self.levels:
                self.levels[task] = min(max(int(level), 0), self.top_levels[task])
        for task, recent in state.get("windows", {}).items():
            if task in self.windows:
                self.windows[task] = deque(map(bool, recent), maxlen=self.window)


class VerdictRecorder:
    """The reward-side hook: keeps this process's verdicts until the next level update takes them, and logs
    each task's level (`curriculum/<task>/level`) through TRL's `log_metric`."""

    def __init__(self, levels: Callable[[], Mapping[str, int]]):
        self.levels = levels
        self.pending: list[Verdict] = []

    def __call__(self, columns: Mapping[str, Any], correct: list[bool]) -> None:
        tasks = columns.get("task") or []
        drawn_at = columns.get("level") or [None] * len(tasks)
        self.pending += [(t, lv, ok) for t, lv, ok in zip(tasks, drawn_at, correct) if lv is not None]
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            for task, level in sorted(self.levels().items()):
                log_metric(f"curriculum/{task}/level", float(level))

    def take(self) -> list[Verdict]:
        taken, self.pending = self.pending, []
        return taken
