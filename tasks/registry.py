"""Every task by name: reasoning-gym's registry, plus the project's own tasks registered into it.
`TaskSet` builds the data, reads each completion in the run's prompt format and scores it (1.0: correct)."""

import dataclasses
import hashlib
import importlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec
from reasoning_gym.factory import DATASETS

from grpo_common import formats
from grpo_common.errors import ConfigError, did_you_mean, is_number
from grpo_common.formats import Extraction

# Our own tasks, by the module that registers them on import: imported on first use, so a run without
# them never loads it; `available_tasks` lists them all the same.
OWN_TASKS = {
    "sum_digits": "tasks.digits",
    "reverse_digits": "tasks.digits",
    "qa_file": "tasks.qa_file",
    "humaneval": "tasks.code",
    "code_file": "tasks.code",
    "python_functions": "tasks.python_functions",
}
CODE_TASKS = {"humaneval", "code_file", "python_functions"}  # answered by programs, run against tests
MANAGED_KEYS = {"seed", "size"}  # in every reasoning-gym config; the recipe sets them (dataset.seed, sizes)
JUDGED_KEPT = 4096  # verdicts TaskSet.judge remembers (a few steps' completions and an eval)
ALIASES = {"game_of_24": "puzzle24", "24_game": "puzzle24", "countdown_game": "countdown"}  # common names


def available_tasks() -> list[str]:
    return sorted((set(DATASETS) | set(OWN_TASKS)) - {"composite"})  # reasoning-gym's mixture wrapper


def is_code_task(name: str) -> bool:
    return name in CODE_TASKS


def holdout_of(task: str, setting: str = "auto") -> str:
    """What an eval problem of `task` keeps out of training: auto is a code task's function (its problems
    differ only by their example input), the question otherwise. (The knob check refuses other settings.)"""
    if setting == "auto":
        return "function" if is_code_task(task) else "question"
    if setting != "question" and not is_code_task(task):
        raise ConfigError(
            f"dataset.holdout={setting}: task '{task}' is not a code task and has no {setting} to hold out; "
            f"it accepts question or auto ({setting} holds out code tasks: {', '.join(sorted(CODE_TASKS))})"
        )
    return setting


def normalised(question: str) -> str:
    """A question as eval sets and the hold-out compare it: lower case, whitespace collapsed."""
    return " ".join(str(question).lower().split())


def holdout_key(entry: Mapping[str, Any], setting: str = "auto") -> str:
    """What an entry or row holds out of training: its normalised question, or a code task's function
    (`clamp_5`) or template, read from the metadata field its dataset's `holdout_fields` names."""
    metadata = entry["metadata"]
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    task = str(entry.get("task") or metadata.get("source_dataset"))
    mode = holdout_of(task, setting)
    if mode != "question":
        value = metadata.get(registered(task)[0].holdout_fields[mode])
        if value not in (None, ""):  # a code_file row without an entry point is its own function
            return f"{task}:{mode}:{value}"
    return "question:" + normalised(entry["question"])


def registered(name: str) -> tuple[type, type] | None:
    """(dataset class, config class) of a task, registering one of ours on first use; None: no such task."""
    if name in OWN_TASKS:
        importlib.import_module(OWN_TASKS[name])
    return DATASETS.get(name)


def task_config_keys(name: str) -> list[str]:
    _, config_cls = registered(name)
    return sorted(f.name for f in dataclasses.fields(config_cls) if f.name not in MANAGED_KEYS)


def _suggest(bad: str, choices: list[str]) -> str:
    return did_you_mean(bad, choices, cutoff=0.5, first=(ALIASES[bad],) if bad in ALIASES else ())


def validate_tasks(tasks: Mapping[str, Any], where: str | None = None) -> dict[str, dict[str, Any]]:
    """Check every task name, config key and value; return `{name: {weight, config}}`. `where`: the config
    path of a single task set elsewhere (`eval.transfer.<key>`); by default each is `dataset.tasks.<name>`."""
    if not isinstance(tasks, Mapping) or not tasks:
        raise ConfigError("dataset.tasks must be a non-empty mapping of task name -> {weight, config}")
    names, out = available_tasks(), {}
    group = f"{where}.task" if where else "dataset.tasks"
    for name, spec in tasks.items():
        name, spec, path = str(name), dict(spec or {}), where or f"dataset.tasks.{name}"
        if unknown := set(spec) - {"weight", "config"}:
            raise ConfigError(
                f"{path}: unknown key(s) {sorted(unknown)}; each task takes 'weight' and 'config'"
            )
        weight, config = spec.get("weight", 1.0), dict(spec.get("config") or {})
        if not is_number(weight) or weight <= 0:
            raise ConfigError(f"{path}.weight must be a positive number, got {weight!r}")
        if name not in names:
            raise ConfigError(
                f"{group}: unknown task '{name}'.{_suggest(name, names)} "
                f"({len(names)} tasks available: `python -m tasks` lists them)"
            )
        keys = task_config_keys(name)
        if bad := [key for key in config if key not in keys]:
            raise ConfigError(
                f"{path}.config: unknown key '{bad[0]}'.{_suggest(bad[0], keys)} "
                f"Accepted keys: {', '.join(keys) or '(none)'}"
            )
        try:
            checked = registered(name)[1](**config)
            if hasattr(checked, "validate"):
                checked.validate()
        except (AssertionError, ValueError, TypeError) as err:
            raise ConfigError(f"{path}.config is invalid: {err or type(err).__name__}") from None
        out[name] = {"weight": float(weight), "config": config}
    return out


class TaskSet:
    """A mixture of tasks (weights: sampling probabilities) with their verifiers, reading `prompt_format`;
    `holdout` (dataset.holdout) says what an eval problem keeps out of training (`key`)."""

    def __init__(self, tasks: Mapping[str, Any], prompt_format="plain", holdout="auto", where=None):
        self.spec = validate_tasks(tasks, where)
        formats.get_format(prompt_format)  # an unknown name fails here, not at the first answer
        self.prompt_format = prompt_format
        self.holdout = {name: holdout_of(name, holdout) for name in self.spec}  # a task that cannot: refused
        self.holdout_setting = holdout
        self.names = list(self.spec)
        self._scorer = self._composite(size=1, seed=0)
        # one verification per completion, shared by a step's rewards and a later eval of the same text
        self._judged: OrderedDict[str, tuple[Extraction, float]] = OrderedDict()

    def _composite(self, size: int, seed: int) -> CompositeDataset:
        specs = [DatasetSpec(name, s["weight"], dict(s["config"])) for name, s in self.spec.items()]
        return CompositeDataset(CompositeConfig(size=size, seed=seed, datasets=specs))

    def score_too(self, other: "TaskSet") -> None:
        """Verify `other`'s tasks too (a transfer set's untrained task); what is trained is unchanged."""
        for name in other.names:
            self._scorer.datasets.setdefault(name, other._scorer.datasets[name])

    def key(self, entry: Mapping[str, Any]) -> str:
        return holdout_key(entry, self.holdout_setting)

    def sample(self, size: int, seed: int, exclude_keys: set[str] = ()) -> list[dict[str, Any]]:
        """`size` draws, less those whose hold-out key is excluded."""
        return [e for e in self._composite(size, seed) if not exclude_keys or self.key(e) not in exclude_keys]

    def distinct(self, size: int, seed: int, exclude_keys=(), draws: int = 4096) -> tuple[list[dict], int]:
        """Up to `size` problems in draw order, no two with the same hold-out key or normalised question,
        none with a key in `exclude_keys`; and the number of draws made."""
        composite = self._composite(max(draws, size), seed)
        keys, questions, out = set(exclude_keys), set(), []
        for i, entry in enumerate(composite):
            key, question = self.key(entry), normalised(entry["question"])
            if key not in keys and question not in questions:
                keys.add(key)
                questions.add(question)
                out.append(entry)
                if len(out) == size:
                    return out, i + 1
        return out, len(composite)

    def extract(self, text: str, task: str | None) -> Extraction:
        """A code task's program is read as code whatever the prompt format (the code preset's `think`)."""
        return formats.reader(self.prompt_format, task in CODE_TASKS).extract(text)

    def judge(self, texts: list[str], entries: list[Mapping[str, Any]]) -> list[tuple[Extraction, float]]:
        """Extract and score a batch, each (text, entry) once; a task that scores in batches (code: programs
        run in parallel) is given its share at once."""
        # a short digest of each (completion, entry): a HumanEval entry alone is kilobytes
        fields = ("task", "question", "answer", "metadata")
        raw = ["\x00".join(map(str, (t, *map(e.get, fields)))) for t, e in zip(texts, entries)]
        keys = [hashlib.sha256(r.encode("utf-8", "replace")).hexdigest() for r in raw]
        todo: dict[str, dict[str, int]] = {}  # task -> {key: its first index}
        for i, key in enumerate(keys):
            if key not in self._judged:
                todo.setdefault(str(entries[i].get("task")), {}).setdefault(key, i)
        for task, first in todo.items():
            idx = list(first.values())
            found = [self.extract(texts[i], task) for i in idx]
            dataset = self._scorer.datasets.get(task)
            if hasattr(dataset, "score_answers"):
                scores = dataset.score_answers([x.answer for x in found], [entries[i] for i in idx])
            else:
                scores = [self.score(x.answer, entries[i]) for x, i in zip(found, idx)]
            for i, extraction, score in zip(idx, found, scores):
                self._judged[keys[i]] = (extraction, float(score))
        out = [self._judged[k] for k in keys]
        while len(self._judged) > JUDGED_KEPT:
            self._judged.popitem(last=False)
        return out

    def verifiers(self) -> dict[str, str]:
        """What each task's score means (for the eval's JSON and the report)."""
        default = "the task's own verifier (score_answer), correct at a score of 1"
        found = self._scorer.datasets  # the trained tasks, then those only evaluated (score_too)
        return {name: d.verifier() if hasattr(d, "verifier") else default for name, d in found.items()}

    def score(self, answer: str | None, entry: Mapping[str, Any]) -> float:
        """The task's own verifier; never raises (a verifier crash on odd input scores 0)."""
        from grpo_common.answers import same_answer

        if answer is None:
            return 0.0
        metadata = entry["metadata"]
        # A row's metadata is JSON text, which turns tuples into lists; ARC's verifier compares the grid
        # with a tuple of tuples, so a correct grid scored 0.05 from a row.
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
            if metadata.get("source_dataset") in ("arc_agi", "rearc"):
                metadata = {**metadata, "output": tuple(map(tuple, metadata["output"]))}
        ref = entry["answer"]
        full = {"question": entry.get("question", ""), "answer": ref, "metadata": metadata}
        score = self._verify(answer, full)
        if score < 1.0 and isinstance(answer, str) and isinstance(ref, str) and same_answer(answer, ref):
            # The extraction writes numbers plainly ("0.0" -> "0") and drops a sentence's full stop: a
            # verifier that compares spellings (codeio, emoji_mystery) is given the reference's spelling.
            score = max(score, self._verify(ref, full))
        return score

    def _verify(self, answer: str, full: Mapping[str, Any]) -> float:
        try:
            return float(self._scorer.score_answer(answer, full))
        except Exception:  # noqa: BLE001 - third-party verifiers can fail on arbitrary model text
            return 0.0
