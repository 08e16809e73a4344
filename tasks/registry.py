"""Every task by name: reasoning-gym's registry, plus the project's own tasks registered into it.

`validate_tasks` checks names and config keys before anything is built or written, with close
matches in the message; `TaskSet` builds the data, reads each completion in the run's prompt format
(grpo_common/formats.py) and scores answers through each task's own verifier (reasoning-gym's
`score_answer`, graded: 1.0 means correct).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec
from reasoning_gym.factory import DATASETS

from grpo_common import formats
from grpo_common.answers import same_answer
from grpo_common.errors import ConfigError
from grpo_common.formats import Extraction, PromptFormat
from tasks import digits, qa_file

digits.register()
qa_file.register()
# The code tasks and their module: imported (and registered) when one is validated or built, so a run
# without them never loads it; `available_tasks` lists them all the same.
CODE_TASKS = {
    "humaneval": "tasks.code",
    "code_file": "tasks.code",
    "python_functions": "tasks.python_functions",
}

# Keys every reasoning-gym config has that the recipe sets itself (from dataset.seed / sizes).
_MANAGED_KEYS = {"seed", "size"}
JUDGED_KEPT = 4096  # verdicts TaskSet.judge remembers (a few steps' completions and an eval)


# reasoning-gym registers its mixture wrapper as a dataset; mixtures are `dataset.tasks` here.
NOT_TASKS = {
    "composite": "reasoning-gym's mixture wrapper is not a task: list the tasks to mix under dataset.tasks"
}


def available_tasks() -> list[str]:
    return sorted((set(DATASETS) | set(CODE_TASKS)) - set(NOT_TASKS))


def is_code_task(name: str) -> bool:
    """A task whose answers are programs, run against its tests."""
    return name in CODE_TASKS


def _registered(name: str) -> tuple[type, type]:
    """(dataset class, config class) of a task, registering a code task on first use."""
    if name in CODE_TASKS and name not in DATASETS:
        importlib.import_module(CODE_TASKS[name]).register()
    return DATASETS[name]


def task_config_keys(name: str) -> list[str]:
    _, config_cls = _registered(name)
    return sorted(f.name for f in dataclasses.fields(config_cls) if f.name not in _MANAGED_KEYS)


# Tasks whose own reference answer cannot be scored as correct (each checked against the task's
# source in reasoning_gym/). They train and evaluate fine: their verifier accepts any valid
# solution. tests/test_task_registry.py xfails them strictly, so a fixed task must leave the list.
# Per entry, not per task (so not listed): an `ab` program that reduces to nothing has the answer ""
# and its verifier wants exactly "", which no extraction gives (an empty tag is no answer): ~0.3%
# of ab entries; gsm_symbolic's verifier reads "-1" as 1 (regex `\b-?\d+`), so a negative answer
# never scores: ~0.2% of its entries.
KNOWN_UNSCORABLE: dict[str, str] = {
    "boxnet": (
        "answer is None: any plan that moves the boxes is scored by simulation; no reference plan is stored"
    ),
    "graph_color": (
        "answer is None: any valid colouring scores 1 (metadata.possible_answer holds one, as a dict)"
    ),
    "propositional_logic": "answer is None: any conclusion that follows from the premises scores 1 "
    "(metadata.example_answer holds one)",
    "rubiks_cube": "answer is None: any move sequence that solves the cube scores 1 "
    "(metadata.example_correct_answer holds one)",
    "rush_hour": (
        "answer is None: any move sequence that frees the red car scores 1; no reference solution is stored"
    ),
}


def _board(grid: Any) -> tuple:
    return tuple(tuple(row) for row in grid)


# Rows carry metadata as JSON text, which turns tuples into lists. Verifiers that compare against a
# tuple get it back here (ARC: `parse_board(answer) == metadata["output"]`, a tuple of tuples, so a
# correct grid scored 0.05 from a row). tests/test_task_registry.py scores every task from its row.
def _revive_output_grid(metadata: dict) -> dict:
    return {**metadata, "output": _board(metadata["output"])}


_METADATA_FROM_JSON = {"arc_agi": _revive_output_grid, "rearc": _revive_output_grid}


def metadata_from_json(text: str) -> Any:
    """An entry's metadata from a row's JSON text, with the types its verifier compares restored."""
    metadata = json.loads(text)
    revive = _METADATA_FROM_JSON.get(metadata.get("source_dataset")) if isinstance(metadata, dict) else None
    if revive is not None:
        try:
            metadata = revive(metadata)
        except (KeyError, TypeError):
            pass
    return metadata


# Names people use for tasks that reasoning-gym registers under another name.
ALIASES = {"game_of_24": "puzzle24", "24_game": "puzzle24", "countdown_game": "countdown"}


def _suggest(bad: str, choices: list[str]) -> str:
    close = ([ALIASES[bad]] if bad in ALIASES else []) + difflib.get_close_matches(
        bad, choices, n=3, cutoff=0.5
    )
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
                f"dataset.tasks.{name}: unknown key(s) {sorted(unknown)}; each task takes 'weight' and "
                "'config'"
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
        if name in NOT_TASKS:
            raise ConfigError(f"dataset.tasks: '{name}': {NOT_TASKS[name]}")
        if name not in names:
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
        _, config_cls = _registered(name)
        try:
            config = config_cls(**spec["config"])
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, ValueError, TypeError) as err:
            raise ConfigError(
                f"dataset.tasks.{name}.config is invalid: {err or type(err).__name__}"
            ) from None
    return tasks


def _judge_key(text: str, entry: Mapping[str, Any]) -> str:
    """A completion and the entry it answers, as a short digest (a HumanEval entry alone is kilobytes)."""
    parts = (entry.get("task"), text, entry.get("question"), entry.get("answer"), entry.get("metadata"))
    return hashlib.sha256("\x00".join(map(str, parts)).encode("utf-8", "replace")).hexdigest()


class TaskSet:
    """A weighted mixture of tasks (weights are sampling probabilities) with their verifiers, reading
    completions in `prompt_format`."""

    def __init__(self, tasks: Mapping[str, Any], prompt_format: str = "plain"):
        self.spec = validate_tasks(tasks)
        formats.get_format(prompt_format)  # an unknown name fails here, not at the first answer
        self.prompt_format = prompt_format
        self._scorer = self._composite(size=1, seed=0)
        # One verification per completion: the rewards of a step (code_tests, accuracy, ...) and a later
        # eval of the same text share it. Keyed by the text and the entry it answers.
        self._judged: OrderedDict[str, tuple[Extraction, float]] = OrderedDict()

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

    def reader(self, task: str | None) -> PromptFormat:
        """The format that reads a completion for `task`: a code task's program is read as code whatever
        the prompt format asks (the code preset has `think`, with the program inside <answer>)."""
        return formats.reader(self.prompt_format, bool(task) and is_code_task(task))

    def extract(self, text: str, task: str | None) -> Extraction:
        """The answer in a completion: the program for a code task, else the prompt format's answer."""
        return self.reader(task).extract(text)

    def judge(self, texts: list[str], entries: list[Mapping[str, Any]]) -> list[tuple[Extraction, float]]:
        """Extract and score a batch, each (text, entry) once; tasks that score in batches (code: programs
        run in parallel) do."""
        keys = [_judge_key(t, e) for t, e in zip(texts, entries)]
        first: dict[str, int] = {}  # a group's identical completions run once too
        for i, k in enumerate(keys):
            if k not in self._judged:
                first.setdefault(k, i)
        todo = list(first.values())
        by_task: dict[str, list[int]] = {}
        for i in todo:
            by_task.setdefault(str(entries[i].get("task")), []).append(i)
        for task, idx in by_task.items():
            extractions = {i: self.extract(texts[i], entries[i].get("task")) for i in idx}
            dataset = self._scorer.datasets.get(task)
            if dataset is not None and hasattr(dataset, "score_answers"):
                scores = dataset.score_answers(
                    [extractions[i].answer for i in idx], [entries[i] for i in idx]
                )
            else:
                scores = [self.score(extractions[i].answer, entries[i]) for i in idx]
            for i, score in zip(idx, scores):
                self._judged[keys[i]] = (extractions[i], float(score))
        out = [self._judged[k] for k in keys]
        while len(self._judged) > JUDGED_KEPT:
            self._judged.popitem(last=False)
        return out

    def verifiers(self) -> dict[str, str]:
        """What each task's score means (the eval's JSON and the report say it)."""
        out = {}
        for name in self.names:
            dataset = self._scorer.datasets.get(name)
            out[name] = (
                dataset.verifier()
                if hasattr(dataset, "verifier")
                else "the task's own verifier (score_answer), correct at a score of 1"
            )
        return out

    def score(self, answer: str | None, entry: Mapping[str, Any]) -> float:
        """The task's own verifier; never raises (a verifier crash on odd input scores 0)."""
        if answer is None:
            return 0.0
        metadata = entry["metadata"]
        if isinstance(metadata, str):
            metadata = metadata_from_json(metadata)
        full = {"question": entry.get("question", ""), "answer": entry["answer"], "metadata": metadata}
        score = self._verify(answer, full)
        reference = entry["answer"]
        if (
            score < 1.0
            and isinstance(answer, str)
            and isinstance(reference, str)
            and answer != reference
            and same_answer(answer, reference)
        ):
            # The extraction writes numbers plainly ("0.0" -> "0", "1,000" -> "1000") and drops a sentence's
            # full stop; a verifier that compares spellings (codeio: "0.0"; emoji_mystery's sentences end
            # in ".") is given the reference's spelling of the same answer.
            score = max(score, self._verify(reference, full))
        return score

    def _verify(self, answer: str, full: Mapping[str, Any]) -> float:
        try:
            return float(self._scorer.score_answer(answer, full))
        except Exception:  # noqa: BLE001 - third-party verifiers can fail on arbitrary model text
            return 0.0
