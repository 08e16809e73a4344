"""Train and eval data from the `dataset` and `eval` config groups.

The eval set is drawn per task with its own seed and is identical across runs with the same config: the fixed
eval, then the transfer sets (`eval.transfer`), each of distinct problems, drawn on until enough are found (a
space too small is refused, saying how many it has). Training drops every problem that shares an eval
problem's hold-out key (`dataset.holdout`: its question, or a code task's function or template).
Rows carry `metadata` as JSON text: its shape differs per task and Arrow rejects mixed columns.
"""

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from grpo_common.errors import ConfigError
from grpo_common.formats import get_format
from tasks import TaskSet

EVAL_DRAWS = 4096  # candidates drawn for an eval set (16 a problem, if more) before its space is too small
TRANSFER_SEED = 500  # transfer set j draws from eval.seed + 500 + j: apart from the tasks' seed + i
UNITS = {"question": "problems", "function": "functions", "template": "templates"}
LESS = {"function": "question", "template": "function"}  # a code eval's space, larger


def transfer_sets(dataset_cfg: dict[str, Any], eval_cfg: dict[str, Any]) -> dict[str, TaskSet]:
    """`eval.transfer` as {key: its one-task TaskSet} (a `weight` is ignored; null: off)."""
    out = {}
    for key, spec in (eval_cfg.get("transfer") or {}).items():
        if spec is None:
            continue
        where = f"eval.transfer.{key}"
        if not isinstance(spec, Mapping) or set(spec) - {"task", "weight", "config"}:
            raise ConfigError(
                f"{where}={spec!r}: expected {{task: <a task name; default {key}>, config: {{...}}}}"
            )
        if key in dataset_cfg["tasks"]:
            raise ConfigError(
                f"{where}: a transfer set's key names its rows and metrics apart from the fixed eval's, so "
                f"it cannot be a training task's name; e.g. {key}_transfer: {{task: {key}, config: ...}}"
            )
        task = {str(spec.get("task", key)): {"config": spec.get("config") or {}}}
        out[str(key)] = TaskSet(task, dataset_cfg["prompt_format"], dataset_cfg["holdout"], where)
    return out


def draw_distinct(
    one: TaskSet, size: int, seed: int, taken: set[str], asked: str, who: tuple[str, str], fix: str
):
    """`size` problems of the one-task set `one`, distinct by hold-out key and question, none in `taken`
    (which grows by them); a space too small is refused with how many it holds."""
    entries, drawn = one.distinct(size, seed, taken, max(EVAL_DRAWS, 16 * size))
    if len(entries) < size:
        mode, n = next(iter(one.holdout.values())), len(entries)
        less = f", or hold out less: dataset.holdout={LESS[mode]}" if mode in LESS else ""
        raise ConfigError(
            f"{asked}={size}: {who[0]} has only {n} distinct {UNITS[mode]} {who[1]} ({drawn} drawn); lower "
            f"{asked} to at most {n} or {fix}{less}"
        )
    taken.update(one.key(e) for e in entries)
    return entries


def system_prompt(dataset_cfg: dict[str, Any]) -> str | None:
    """The dataset's system prompt, else its prompt format's (None: no system message)."""
    override = dataset_cfg["system_prompt"]
    return get_format(dataset_cfg["prompt_format"]).system_prompt if override is None else override


class Shot(NamedTuple):  # one worked example of `dataset.few_shot`
    question: str
    completion: str
    tool_calls: tuple[tuple[str, dict[str, Any], str], ...] = ()  # made before it: (name, arguments, reply)


Shots = Sequence[Shot]  # dataset.few_shot

SHOT_FORM = (
    "{question: ..., completion: ...} (non-empty strings; the completion as the model should write it), "
    "optionally with tool_calls: [{name: <a tool>, arguments: {...}, result: <its reply>}] made before it"
)


def _tool_calls(calls: Any, where: str) -> tuple[tuple[str, dict[str, Any], str], ...]:
    if not isinstance(calls, list) or not calls:
        raise ConfigError(f"{where}={calls!r}: expected a non-empty list of {{name, arguments, result}}")
    out = []
    for j, call in enumerate(calls):
        if not (
            isinstance(call, Mapping)
            and set(call) == {"name", "arguments", "result"}
            and isinstance(call["name"], str)
            and call["name"].strip()
            and isinstance(call["arguments"], Mapping)
            and all(isinstance(k, str) for k in call["arguments"])
            and isinstance(call["result"], str)
        ):
            raise ConfigError(
                f"{where}[{j}]={call!r}: expected {{name: <a tool>, arguments: {{<argument>: <value>}}, "
                "result: <the tool's reply, a string>}"
            )
        out.append((call["name"], dict(call["arguments"]), call["result"]))
    return tuple(out)


def few_shot(dataset_cfg: dict[str, Any]) -> Shots:
    """`dataset.few_shot` as Shots; a bad item is named."""
    shots = []
    for i, item in enumerate(dataset_cfg["few_shot"] or []):
        texts = ("question", "completion")
        if not (
            isinstance(item, Mapping)
            and set(item) - {"tool_calls"} == set(texts)
            and all(isinstance(item[k], str) and item[k].strip() for k in texts)
        ):
            raise ConfigError(f"dataset.few_shot[{i}]={item!r}: each example is {SHOT_FORM}")
        where = f"dataset.few_shot[{i}].tool_calls"
        calls = _tool_calls(item["tool_calls"], where) if "tool_calls" in item else ()
        shots.append(Shot(item["question"], item["completion"], calls))
    return shots


def build_messages(question: str, system: str | None, shots: Shots = ()) -> list[dict[str, Any]]:
    """System message, each worked example as earlier turns, then the question. A small model copies an answer
    it has already "written" far more reliably than an example inside the system prompt (README, "Experiment
    presets")."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for shot in shots:
        messages.append({"role": "user", "content": shot.question})
        for name, arguments, result in shot.tool_calls:
            call = {"type": "function", "function": {"name": name, "arguments": arguments}}
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append({"role": "tool", "name": name, "content": result})
        messages.append({"role": "assistant", "content": shot.completion})
    return messages + [{"role": "user", "content": question}]


def to_row(entry: dict[str, Any], system: str | None, shots: Shots = ()) -> dict[str, Any]:
    return {
        "prompt": build_messages(entry["question"], system, shots),
        "question": entry["question"],
        "answer": str(entry["answer"]),
        "task": entry["metadata"].get("source_dataset", "unknown"),
        "metadata": json.dumps(entry["metadata"], default=str),
    }


def build_eval_set(dataset_cfg: dict[str, Any], eval_cfg: dict[str, Any]):
    """(TaskSet, system prompt, few-shot pairs, eval rows): `eval.size` problems per task, then per transfer
    set (rows marked `eval_set: transfer` and `transfer: <its key>`); no two share a hold-out key or a
    question."""
    holdout = dataset_cfg["holdout"]
    taskset = TaskSet(dataset_cfg["tasks"], dataset_cfg["prompt_format"], holdout)
    system, shots = system_prompt(dataset_cfg), few_shot(dataset_cfg)
    size, seed, taken, eval_rows = int(eval_cfg["size"]), int(eval_cfg["seed"]), set(), []
    for i, name in enumerate(taskset.names):
        one = TaskSet({name: taskset.spec[name]}, holdout=holdout)
        who, fix = (f"task '{name}'", "in its configured range"), f"widen dataset.tasks.{name}.config"
        drawn = draw_distinct(one, size, seed + i, taken, "eval.size", who, fix)
        eval_rows += [to_row(e, system, shots) for e in drawn]
    for j, (key, one) in enumerate(transfer_sets(dataset_cfg, eval_cfg).items()):
        taskset.score_too(one)  # a neighbouring task (gsm8k's leg_counting) is scored like the trained ones
        who = (f"transfer set '{key}' (task '{one.names[0]}')", "outside the fixed eval")
        fix = f"widen eval.transfer.{key}.config"
        drawn = draw_distinct(one, size, seed + TRANSFER_SEED + j, taken, "eval.size", who, fix)
        eval_rows += [{**to_row(e, system, shots), "eval_set": "transfer", "transfer": key} for e in drawn]
    return taskset, system, shots, eval_rows


def check_trained(taskset: TaskSet, entries: list[dict[str, Any]]) -> None:
    """Every task keeps training problems once the eval's are held out."""
    counts = Counter(e["metadata"]["source_dataset"] for e in entries)
    for name in taskset.names:
        if not counts[name]:
            raise ConfigError(
                f"dataset.tasks.{name}: every training problem drawn shares its {taskset.holdout[name]} with "
                "an eval problem; lower eval.size (or the transfer sets'), raise dataset.train_size or widen "
                f"dataset.tasks.{name}.config"
            )


def build_datasets(dataset_cfg: dict[str, Any], eval_cfg: dict[str, Any]):
    """(TaskSet, train Dataset, eval rows); dataset.curriculum's: grpo_recipes/train/curriculum.py."""
    from datasets import Dataset, Features, Json, Value

    taskset, system, shots, eval_rows = build_eval_set(dataset_cfg, eval_cfg)
    held_out = {taskset.key(r) for r in eval_rows}
    entries = taskset.sample(int(dataset_cfg["train_size"]), int(dataset_cfg["seed"]), exclude_keys=held_out)
    check_trained(taskset, entries)
    # prompts as JSON: Arrow would merge every message into one struct type (worked tool calls with different
    # arguments would gain each other's keys as nulls, or fail on a type clash)
    features = Features(
        {"prompt": Json(), **{c: Value("string") for c in ("question", "answer", "task", "metadata")}}
    )
    train = Dataset.from_list([to_row(e, system, shots) for e in entries], features=features)
    return taskset, train, eval_rows
