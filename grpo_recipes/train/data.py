"""Train and fixed-eval data from the `dataset` and `eval` config groups.

The eval set is drawn per task with its own seed and is identical across runs with the same
config; train entries whose question is in the eval set are dropped, so the two never overlap.
Rows carry `metadata` as JSON text: its shape differs per task and Arrow rejects mixed columns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grpo_common.errors import ConfigError
from grpo_common.formats import get_format
from tasks import TaskSet

Shots = Sequence[tuple[str, str]]  # dataset.few_shot as (question, completion) pairs


def system_prompt(dataset_cfg: dict[str, Any]) -> str | None:
    """The dataset's system prompt, else its prompt format's (None: no system message)."""
    override = dataset_cfg["system_prompt"]
    return get_format(dataset_cfg["prompt_format"]).system_prompt if override is None else override


def few_shot(dataset_cfg: dict[str, Any]) -> Shots:
    """`dataset.few_shot` as (question, completion) pairs; one message naming the bad item otherwise."""
    pairs = []
    for i, item in enumerate(dataset_cfg["few_shot"] or []):
        if not (
            isinstance(item, dict)
            and set(item) == {"question", "completion"}
            and all(isinstance(v, str) and v.strip() for v in item.values())
        ):
            raise ConfigError(
                f"dataset.few_shot[{i}]={item!r}: each example is a mapping of two non-empty strings, "
                "{question: ..., completion: ...} (the completion as the model should write it)"
            )
        pairs.append((item["question"], item["completion"]))
    return pairs


def build_messages(question: str, system: str | None, shots: Shots = ()) -> list[dict[str, str]]:
    """System message, then each worked example as an earlier user/assistant turn, then the question.
    A small model copies an answer it has already "written" far more reliably than an example inside
    the system prompt (README, "Experiment presets")."""
    messages = [{"role": "system", "content": system}] if system else []
    for shot_question, completion in shots:
        messages += [{"role": "user", "content": shot_question}, {"role": "assistant", "content": completion}]
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
    """(TaskSet, system prompt, few-shot pairs, eval rows): the tasks as configured, and their fixed eval:
    `eval.size` problems per task, each task with its own seed offset."""
    taskset = TaskSet(dataset_cfg["tasks"], dataset_cfg["prompt_format"])
    system, shots = system_prompt(dataset_cfg), few_shot(dataset_cfg)
    eval_rows = []
    for i, name in enumerate(taskset.names):
        drawn = TaskSet({name: taskset.spec[name]}).sample(int(eval_cfg["size"]), int(eval_cfg["seed"]) + i)
        eval_rows += [to_row(e, system, shots) for e in drawn]
    return taskset, system, shots, eval_rows


def build_datasets(dataset_cfg: dict[str, Any], eval_cfg: dict[str, Any]):
    """(TaskSet, train Dataset, eval rows); dataset.curriculum's: grpo_recipes/train/curriculum.py."""
    from datasets import Dataset

    taskset, system, shots, eval_rows = build_eval_set(dataset_cfg, eval_cfg)
    held_out = {r["question"] for r in eval_rows}
    entries = taskset.sample(
        int(dataset_cfg["train_size"]), int(dataset_cfg["seed"]), exclude_questions=held_out
    )
    if not entries:
        raise ConfigError(
            "dataset: every train problem is also in the eval set; raise dataset.train_size "
            "or widen the task config"
        )
    return taskset, Dataset.from_list([to_row(e, system, shots) for e in entries]), eval_rows
