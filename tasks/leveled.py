"""Training problems drawn on the fly at each task's current level.

Index `i` maps to one problem per level: reasoning-gym's composite draws it from `seed + i` (task by
weight, then the task's own generator), so every completion of a group, which TRL fetches by the same
index, gets the same problem. A level change rebuilds that task's generator
(`CompositeDataset.update_dataset_config`, as reasoning-gym's `CurriculumExperiment` does). A problem
whose question is held out (the fixed eval) is redrawn from index `i + size`, `i + 2 * size`, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

from tasks.difficulty import config_at

MAX_DRAWS = 16  # draws per index before giving up: the held-out set covers (nearly) every problem


class LeveledTasks:
    """`size` problems of the mixture `spec` (TaskSet.spec), the tasks in `levels` at their level."""

    def __init__(
        self,
        spec: Mapping[str, Mapping[str, Any]],
        levels: Mapping[str, int],
        size: int,
        seed: int,
        exclude_questions: set[str] | frozenset[str] = frozenset(),
    ):
        self.spec, self.levels = spec, dict(levels)
        self.size, self.exclude = size, exclude_questions
        datasets = [DatasetSpec(name, s["weight"], self._config(name)) for name, s in spec.items()]
        # sized for the redraws: a few generators (word_ladder) refuse an index past their size
        self._composite = CompositeDataset(
            CompositeConfig(size=size * MAX_DRAWS, seed=seed, datasets=datasets)
        )
        self._drawn: dict[int, dict[str, Any]] = {}  # TRL fetches each index once per reuse of a batch

    def _config(self, task: str) -> dict[str, Any]:
        config = dict(self.spec[task]["config"])
        return config_at(task, self.levels[task], config) if task in self.levels else config

    def set_level(self, task: str, level: int) -> None:
        if self.levels[task] != level:
            self.levels[task] = level
            self._composite.update_dataset_config(task, self._config(task))
            self._drawn.clear()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """The problem at `idx` at the current levels; its `level` is the task's (None: no curriculum)."""
        if idx not in self._drawn:
            self._drawn[idx] = self._draw(idx)
        return self._drawn[idx]

    def _draw(self, idx: int) -> dict[str, Any]:
        for attempt in range(MAX_DRAWS):
            entry = self._composite[idx + attempt * self.size]
            if entry["question"] not in self.exclude:
                task = entry["metadata"].get("source_dataset")
                return {**entry, "level": self.levels.get(task)}
        raise RuntimeError(
            f"training problem {idx}: {MAX_DRAWS} draws were all fixed-eval problems at levels "
            f"{self.levels}; the eval set covers (nearly) every problem of a level: lower eval.size "
            "(or dataset.curriculum.eval_per_level)"
        )
