"""Training problems drawn on the fly at each task's current level. Index `i` is one problem per level, drawn
by reasoning-gym's composite from `seed + i`, so every completion of a group (TRL fetches them by the same
index) gets the same problem; a held-out question is redrawn from `i + size`, `i + 2 * size`, ... A level
change rebuilds that task's generator, as reasoning-gym's `CurriculumExperiment` does."""

from collections.abc import Mapping
from typing import Any

from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

from tasks.difficulty import config_at

MAX_DRAWS = 16  # draws per index before giving up: the held-out set covers (nearly) every problem


class LeveledTasks:
    """`size` problems of the mixture `spec` (TaskSet.spec), the tasks in `levels` at their level."""

    def __init__(self, spec: Mapping, levels: Mapping[str, int], size: int, seed: int, exclude_questions=()):
        self.spec, self.levels = spec, dict(levels)
        self.size, self.exclude = size, exclude_questions
        specs = [DatasetSpec(name, s["weight"], self._config(name)) for name, s in spec.items()]
        # sized for the redraws: a few generators (word_ladder) refuse an index past their size
        self._composite = CompositeDataset(CompositeConfig(size=size * MAX_DRAWS, seed=seed, datasets=specs))
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
            draws = (self._composite[idx + attempt * self.size] for attempt in range(MAX_DRAWS))
            entry = next((e for e in draws if e["question"] not in self.exclude), None)
            if entry is None:
                raise RuntimeError(
                    f"training problem {idx}: {MAX_DRAWS} draws were all fixed-eval problems at levels "
                    f"{self.levels}; the eval set covers (nearly) every problem of a level: lower eval.size "
                    "(or the curriculum's per-level eval problems)"
                )
            self._drawn[idx] = {**entry, "level": self.levels.get(entry["metadata"].get("source_dataset"))}
        return self._drawn[idx]
