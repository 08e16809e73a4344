"""Every task by name: reasoning-gym's registry, plus the project's own tasks registered into it.

`validate_tasks` checks names and config keys before anything is built or written, with close
matches in the message; `TaskSet` builds the data and scores answers through each task's own
verifier (reasoning-gym's `score_answer`, graded: 1.0 means correct).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any

from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec
from reasoning_gym.factory import DATASETS

from grpo_recipes.errors import ConfigError
from tasks import digits

digits.register()

# Keys every reasoning-gym config has that the recipe sets itself (from dataset.seed / sizes).
_MANAGED_KEYS = {"seed", "size"}


def available_tasks() -> list[str]:
    return sorted(DATASETS)


def task_config_keys(name: str) -> list[str]:
    _, config_cls = DATASETS[name]
    return sorted(f.name for f in dataclasses.fields(config_cls) if f.name not in _MANAGED_KEYS)


# Names people use for tasks that reasoning-gym registers under another name.
ALIASES = {"game_of_24": "puzzle24", "24_game": "puzzle24", "countdown_game": "countdown"}


def _suggest(bad: str, choices: list[str]) -> str:
    close = ([ALIASES[bad]] if bad in ALIASES else []) + difflib.get_close_matches(bad, choices, n=3, cutoff=0.5)
    return f" Did you mean: {', '.join(close)}?" if close else ""


def _normalise(tasks: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`{name: {weight, config}}`, where a bare `name: null` means weight 1 and no config."""
    if not isinstance(tasks, Mapping) or not tasks:
        raise ConfigError("dataset.tasks must be a non-empty mapping of task name -> {weight, config}")
    out = {}
    for name, spec in tasks.items():
        spec = dict(spec or {})
        unknown = set(spec) - {"weight", "config"}
        if unknown:
            raise ConfigError(
                f"dataset.tasks.{name}: unknown key(s) {sorted(unknown)}; each task takes 'weight' and 'config'"
            )
        weight = spec.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or weight <= 0:
            raise ConfigError(f"dataset.tasks.{name}.weight must be a positive number, got {weight!r}")
        out[str(name)] = {"weight": float(weight), "config": dict(spec.get("config") or {})}
    return out


def validate_tasks(tasks: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Check every task name, config key and value; return the normalised spec."""
    tasks = _normalise(tasks)
    names = available_tasks()
    for name, spec in tasks.items():
        if name not in DATASETS:
            raise ConfigError(
                f"dataset.tasks: unknown task '{name}'.{_suggest(name, names)} "
                f"({len(names)} tasks available: `python -m tasks` lists them)"
            )
        keys = task_config_keys(name)
        for key in spec["config"]:
            if key not in keys:
                raise ConfigError(
                    f"dataset.tasks.{name}.config: unknown key '{key}'.{_suggest(key, keys)} "
                    f"Accepted keys: {', '.join(keys) or '(none)'}"
                )
        _, config_cls = DATASETS[name]
        try:
            config = config_cls(**spec["config"])
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, ValueError, TypeError) as err:
            raise ConfigError(f"dataset.tasks.{name}.config is invalid: {err or type(err).__name__}") from None
    return tasks


class TaskSet:
    """A weighted mixture of tasks (weights are sampling probabilities) with their verifiers."""

    def __init__(self, tasks: Mapping[str, Any]):
        self.spec = validate_tasks(tasks)
        self._scorer = self._composite(size=1, seed=0)

    @property
    def names(self) -> list[str]:
        return list(self.spec)

    def _composite(self, size: int, seed: int) -> CompositeDataset:
        specs = [DatasetSpec(name, s["weight"], dict(s["config"])) for name, s in self.spec.items()]
        config = CompositeConfig(size=size, seed=seed, datasets=specs)
        config.validate()
        return CompositeDataset(config)

    def sample(self, size: int, seed: int, exclude_questions: set[str] | None = None) -> list[dict[str, Any]]:
        """`size` entries drawn with `seed`, skipping any whose question is in `exclude_questions`."""
        exclude = exclude_questions or set()
        entries = [e for e in self._composite(size, seed) if e["question"] not in exclude]
        return entries

    def score(self, answer: str | None, entry: Mapping[str, Any]) -> float:
        """The task's own verifier; never raises (a verifier crash on odd input scores 0)."""
        if answer is None:
            return 0.0
        metadata = entry["metadata"]
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        full = {"question": entry.get("question", ""), "answer": entry["answer"], "metadata": metadata}
        try:
            return float(self._scorer.score_answer(answer, full))
        except Exception:  # noqa: BLE001 - third-party verifiers can fail on arbitrary model text
            return 0.0
