"""`qa_file`: question/answer pairs from your own data (read by tasks/files.py), as a reasoning-gym task.
The stored answer is the final one (after "#### " in GSM8K's format), a number written plainly; answers are
scored by `grpo_common.answers.match_answer` (a number as a number, within `rel_tol`; other text as text)."""

import math
from dataclasses import dataclass
from functools import lru_cache
from random import Random
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import register_dataset

from grpo_common.answers import canonical_answer, match_answer
from grpo_common.errors import is_number
from tasks import files

NAME = "qa_file"
_FORMATS = ("auto", "gsm8k", "plain")
_GSM8K_MARK = "####"


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


@lru_cache(maxsize=8)
def _pairs(key: tuple, question_column: str, answer_column: str, answer_format: str) -> tuple:
    """((question, final answer), ...) of the table at `key`; every error names its config key."""
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
        if not (final := canonical_answer(answer)):
            raise ValueError(f"answer_column '{answer_column}' has no answer in row {row} of {table.source}")
        pairs.append((question, final))
    return tuple(pairs)


@lru_cache(maxsize=4)
def _order(rows: int, seed: int, epoch: int) -> list[int]:  # each pass over the rows: its own order
    order = list(range(rows))
    Random(f"{NAME}:{seed}:{epoch}").shuffle(order)
    return order


@dataclass
class QAFileConfig:
    path: str | None = None
    split: str = "train"  # hub datasets and save_to_disk dirs; a file is one split
    subset: str | None = None  # the hub dataset's config name, e.g. `main` for openai/gsm8k
    question_column: str = "question"
    answer_column: str = "answer"
    answer_format: str = "auto"  # gsm8k: after "#### " | plain: the whole column | auto: gsm8k if any "####"
    rel_tol: float = 1e-6
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        if self.answer_format not in _FORMATS:
            raise ValueError(f"answer_format '{self.answer_format}' is not one of: {', '.join(_FORMATS)}")
        if not is_number(self.rel_tol) or not 0 <= self.rel_tol < 1:
            raise ValueError(f"rel_tol must be a number in [0, 1), got {self.rel_tol!r}")
        self.pairs()

    def pairs(self) -> tuple:
        if self.path in files.UNSET:
            raise ValueError(
                "path is not set: give a .jsonl/.json/.csv/.tsv/.parquet file or a hub dataset "
                f"name, e.g. dataset.tasks.{NAME}.config.path=/data/gsm8k.jsonl"
            )
        key = files.source_key(self.path, self.split, self.subset)
        return _pairs(key, self.question_column, self.answer_column, self.answer_format)


class QAFileDataset(ProceduralDataset):
    def __init__(self, config: QAFileConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.pairs = config.pairs()

    def __getitem__(self, idx: int) -> dict[str, Any]:
        epoch, position = divmod(idx, len(self.pairs))
        row = _order(len(self.pairs), self.seed, epoch)[position]
        question, answer = self.pairs[row]
        return {
            "question": question,
            "answer": answer,
            "metadata": {"source_dataset": NAME, "source_index": idx, "row": row},
        }

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        return match_answer(answer, entry["answer"], self.config.rel_tol)


register_dataset(NAME, QAFileDataset, QAFileConfig)
