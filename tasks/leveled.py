"""Training problems drawn on the fly at each task's current level. Index `i` is one problem per level (every
completion of a group gets the same one); a held-out problem (by `key`) is redrawn from `i + size`,
`i + 2 * size`, ..., then from the next indices' draws (experiment=digits holds half of level 0 out). A level
change rebuilds that task's generator, as reasoning-gym's `CurriculumExperiment` does."""

from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

from tasks.difficulty import config_at

MAX_DRAWS = 16  # draws per index before giving up: the held-out set covers (nearly) every problem
NEIGHBOURS = 16  # then the next indices' draws: up to 16 x MAX_DRAWS candidates


class LeveledTasks:
    """`size` problems of the mixture `spec` (TaskSet.spec), the tasks in `levels` at their level."""

    def __init__(
        self, spec: Mapping, levels: Mapping, size: int, seed: int, exclude=(), key=itemgetter("question")
    ):
        self.spec, self.levels = spec, dict(levels)
        self.size, self.exclude, self.key = size, exclude, key  # `exclude`: the held-out problems' keys
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
        """The problem at `idx` at the current levels; its `level`: None for a task without a curriculum."""
        if idx not in self._drawn:
            draws = (
                self._composite[(idx + shift + attempt * self.size) % len(self._composite)]
                for shift in range(NEIGHBOURS)  # shift 0: the index's own draws
                for attempt in range(MAX_DRAWS)
            )
            entry = next((e for e in draws if self.key(e) not in self.exclude), None)
            if entry is None:
                raise RuntimeError(
                    f"training problem {idx}: {NEIGHBOURS * MAX_DRAWS} draws were all eval problems at "
                    f"levels {self.levels}; the eval covers (nearly) every problem of a level: lower "
                    "eval.size (or the per-level eval size of dataset.curriculum)"
                )
            self._drawn[idx] = {**entry, "level": self.levels.get(entry["metadata"].get("source_dataset"))}
        return self._drawn[idx]
