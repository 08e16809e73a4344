"""`qa_file`: question/answer pairs from your own data (read by tasks/files.py), as a reasoning-gym task.
The stored answer is the final one (after "#### " in GSM8K's format), a number written plainly. `match_answer`
scores it: a number gold answer as a number, within `rel_tol` unless an integer ("$1,000.00" == "1000", "3/4"
== "0.75", "50%" == "50", but "1000 dollars" != 1000), any other as text ignoring case, whitespace and
decoration ("Paris" == " paris. ")."""

import math
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from random import Random
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import register_dataset

from tasks import files

NAME = "qa_file"
_FORMATS = ("auto", "gsm8k", "plain")
_GSM8K_MARK = "####"

# Unicode minus signs and spaces, written plainly.
_MINUS_SIGNS = str.maketrans(
    dict.fromkeys("\u2212\u2012\u2013\ufe63\uff0d", "-") | dict.fromkeys("\u00a0\u2009\u202f", " ")
)
_WRAPPED = (r"\\boxed\{(.*)\}", r"\\text\{(.*)\}", r"\$\$(.*)\$\$", r"\$(.*)\$", r"\\\((.*)\\\)")
_WRAPPERS = [re.compile(p, re.DOTALL) for p in (*_WRAPPED, r"\*\*(.*)\*\*", r"`(.*)`", r'"(.*)"', r"'(.*)'")]
_NUMBER = re.compile(
    r"(?P<sign1>[-+]?)\s*(?P<currency>[$€£¥₹]?)\s*(?P<sign2>[-+]?)\s*"
    r"(?P<body>\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 1,000 / 1,000.50
    r"|\d+/\d+"  # 3/4
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"  # 1000 / 1000.00 / 1000. / .5 / 1e3
    r"\s*(?P<percent>%?)"  # a unit mark, dropped on both sides: "50%" == "50" (no x100)
)
_MAX_EXPONENT = 400  # "1e999999" is not turned into a million-digit integer
_MAX_CHARS = 1_000  # longer answers are compared as text


def _clean(text: Any) -> str:
    """Collapse whitespace, unify minus signs, drop \\boxed{}, $..$, **..**, quotes and a final full stop."""
    s = " ".join(str(text).translate(_MINUS_SIGNS).replace("\\%", "%").replace("\\$", "$").split())
    for _ in range(4):
        before = s
        s = s.rstrip(".").strip()
        for pattern in _WRAPPERS:
            if m := pattern.fullmatch(s):
                s = m.group(1).strip()
        if s == before:
            break
    return s


def _parse(text: Any) -> tuple[Fraction, str | None] | None:
    """'1,000', '$1000', '1000.00', '1e3', '3/4', '50%', '\u22125' -> (value, its plain decimal spelling or
    None for a fraction, exponent or percentage); anything else -> None."""
    s = _clean(text)
    m = _NUMBER.fullmatch(s) if len(s) <= _MAX_CHARS else None
    if not m or (m["sign1"] and m["sign2"]):
        return None
    negative = (m["sign1"] or m["sign2"]) == "-"
    body = m["body"].replace(",", "")
    if "/" in body:
        num, den = map(int, body.split("/"))
        return (Fraction(-num if negative else num, den), None) if den else None
    dec = Decimal(body)
    if abs(dec.adjusted()) > _MAX_EXPONENT:
        return None
    value = -Fraction(dec) if negative else Fraction(dec)
    if "e" in body.lower() or m["percent"]:
        return value, None
    decimal = format(dec, "f")  # '007' -> '7', '.5' -> '0.5', '1000.' -> '1000'
    if "." in decimal:
        decimal = decimal.rstrip("0").rstrip(".")
    return value, "0" if value == 0 else ("-" if negative else "") + decimal


def canonical_answer(text: Any) -> str:
    """A gold answer as stored: a plain decimal written plainly ('1,000' -> '1000'), else cleaned text."""
    decimal = (_parse(text) or (None, None))[1]
    return decimal if decimal is not None else _clean(text)


def match_answer(answer: Any, gold: Any, rel_tol: float = 1e-6) -> float:
    """1.0 when `answer` matches `gold` (the module docstring), else 0.0; never raises."""
    try:
        if answer is None or gold is None:
            return 0.0
        expected = _parse(gold)
        if expected is None:
            return float(_clean(answer).casefold() == _clean(gold).casefold() != "")
        given = _parse(answer)
        if given is None:
            return 0.0
        a, b = given[0], expected[0]
        if a == b or b.denominator == 1:  # an integer gold answer is matched exactly
            return float(a == b)
        return float(abs(a - b) <= Fraction(rel_tol) * max(abs(a), abs(b)))
    except Exception:  # noqa: BLE001 - model text is arbitrary; a verifier must not crash training
        return 0.0


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


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
        if not (final := canonical_answer(answer)):
            raise ValueError(f"answer_column '{answer_column}' has no answer in row {row} of {table.source}")
        pairs.append((question, final))
    return tuple(pairs)


@lru_cache(maxsize=4)
def _order(rows: int, seed: int, epoch: int) -> list[int]:
    """The rows' order in pass `epoch` over them: a seeded permutation of its own."""
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
        tol = self.rel_tol
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
            raise ValueError(f"rel_tol must be a number in [0, 1), got {tol!r}")
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
