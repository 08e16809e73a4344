"""`qa_file`: question/answer pairs from your own data, as a reasoning-gym task.

    dataset.tasks.qa_file.config.path=/data/gsm8k.jsonl

`path` is a .jsonl/.json/.csv/.tsv/.parquet file (gzipped text too), a `datasets.save_to_disk`
directory or a hub dataset name (offline: only from the local HF cache), read by tasks/files.py.
Registered in reasoning-gym's registry like the digit tasks, so it mixes with any rg task.

Config keys: path, split (hub datasets and save_to_disk dirs; a file is one split), subset (the
hub dataset's config name, e.g. `main` for openai/gsm8k), question_column, answer_column,
answer_format (gsm8k: the final answer follows "#### " | plain: the whole column | auto: gsm8k
when any answer holds "####"), rel_tol.

Entries follow a seeded permutation of the rows; `idx` may exceed the row count: each further
pass over the rows has its own seeded permutation (every row once per pass). The stored answer is
the final answer, numbers written plainly ("#### 1,000" -> "1000"); `metadata.row` is the row
index in the file.

Scored by `grpo_common.numbers.match_answer` (1.0 or 0.0, never raises): a number gold answer as a
number ("$1,000.00" == "1000", "3/4" == "0.75", integers exactly, others within `rel_tol`), any other
as text ignoring case, whitespace and decoration ("Paris" == " paris. ").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from random import Random
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset

from grpo_common.numbers import canonical_answer, match_answer
from tasks import files

NAME = "qa_file"
ANSWER_FORMATS = ("auto", "gsm8k", "plain")
_GSM8K_MARK = "####"


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@lru_cache(maxsize=8)
def _pairs(key: tuple, question_column: str, answer_column: str, answer_format: str) -> tuple:
    """((question, final answer), ...) of the table at `key`; every error names its key."""
    table = files.read(key)
    table.require(question_column=question_column, answer_column=answer_column)
    questions = [_text(v).strip() for v in table.column(question_column)]
    answers = [_text(v) for v in table.column(answer_column)]
    if answer_format == "auto":
        answer_format = "gsm8k" if any(_GSM8K_MARK in a for a in answers) else "plain"
    pairs = []
    for row, (question, answer) in enumerate(zip(questions, answers)):
        if not question:
            raise ValueError(f"question_column '{question_column}' is empty in row {row} of {table.source}")
        if answer_format == "gsm8k":
            if _GSM8K_MARK not in answer:
                raise ValueError(
                    f"answer_format 'gsm8k': row {row} of {table.source} has no '#### <final answer>' in "
                    f"'{answer_column}'; use answer_format=plain when the column holds only the answer"
                )
            answer = answer.rsplit(_GSM8K_MARK, 1)[1]
        final = canonical_answer(answer)
        if not final:
            raise ValueError(f"answer_column '{answer_column}' has no answer in row {row} of {table.source}")
        pairs.append((question, final))
    return tuple(pairs)


@dataclass
class QAFileConfig:
    path: str | None = None
    split: str = "train"
    subset: str | None = None
    question_column: str = "question"
    answer_column: str = "answer"
    answer_format: str = "auto"
    rel_tol: float = 1e-6
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"answer_format '{self.answer_format}' is not one of: {', '.join(ANSWER_FORMATS)}"
            )
        if (
            isinstance(self.rel_tol, bool)
            or not isinstance(self.rel_tol, (int, float))
            or not 0 <= self.rel_tol < 1
        ):
            raise ValueError(f"rel_tol must be a number in [0, 1), got {self.rel_tol!r}")
        for key in ("question_column", "answer_column", "split"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ValueError(f"{key} must be a non-empty string, got {getattr(self, key)!r}")
        if self.path not in files.UNSET and not isinstance(self.path, (str, os.PathLike)):
            raise ValueError(f"path must be a file path or hub dataset name, got {self.path!r}")
        self.pairs()

    def pairs(self) -> tuple:
        """The (question, final answer) pairs of the source, in file order (cached)."""
        if self.path in files.UNSET:
            raise ValueError(
                "path is not set: give a .jsonl/.json/.csv/.tsv/.parquet file or a hub dataset "
                f"name, e.g. dataset.tasks.{NAME}.config.path=/data/gsm8k.jsonl"
            )
        key = files.source_key(self.path, self.split, self.subset)
        return _pairs(key, self.question_column, self.answer_column, self.answer_format)


class QAFileDataset(ProceduralDataset):
    """Rows of a question/answer file in a seeded order, scored by `match_answer`."""

    def __init__(self, config: QAFileConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.pairs = config.pairs()
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(next(iter(self._orders)))
            order = list(range(len(self.pairs)))
            Random(f"{NAME}:{self.seed}:{epoch}").shuffle(order)
            self._orders[epoch] = order
        return self._orders[epoch]

    def __getitem__(self, idx: int) -> dict[str, Any]:
        epoch, position = divmod(idx, len(self.pairs))
        row = self._order(epoch)[position]
        question, answer = self.pairs[row]
        return {
            "question": question,
            "answer": answer,
            "metadata": {"source_dataset": NAME, "source_index": idx, "row": row},
        }

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        return match_answer(answer, entry["answer"], self.config.rel_tol)


def register() -> None:
    if NAME not in DATASETS:
        register_dataset(NAME, QAFileDataset, QAFileConfig)
