"""`qa_file`: question/answer pairs from your own data, as a reasoning-gym task.

    dataset.tasks.qa_file.config.path=/data/gsm8k.jsonl

`path` is a local .jsonl, .json, .csv, .tsv or .parquet file (.jsonl/.json/.csv/.tsv may be
gzipped: .jsonl.gz), a directory written by `datasets.save_to_disk`, or a hub dataset name
loaded with `datasets.load_dataset` (offline that works only when it is in the local HF cache).
Registered in reasoning-gym's registry like the digit tasks, so it mixes with any rg task.

Config keys: path, split (hub datasets and save_to_disk dirs; a file is one split), subset (the
hub dataset's config name, e.g. `main` for openai/gsm8k), question_column, answer_column,
answer_format (gsm8k: the final answer follows "#### " | plain: the whole column | auto: gsm8k
when any answer holds "####"), rel_tol.

Entries follow a seeded permutation of the rows; `idx` may exceed the row count: each further
pass over the rows has its own seeded permutation (every row once per pass). The stored answer is
the final answer, numbers written plainly ("#### 1,000" -> "1000"); `metadata.row` is the row
index in the file.

Matching (`score_answer`, 1.0 or 0.0, never raises):
- A gold answer that reads as a number is compared as a number. Accepted spellings, on both
  sides: surrounding spaces, thousands commas ("1,000"), a currency sign ("$1000", "-$5"),
  trailing zeros ("1000.00"), a trailing full stop, scientific notation ("1e3"), a fraction of
  integers ("3/4" == 0.75), Unicode minus signs ("\u22125" == -5), \\boxed{..}, $..$, **..**.
- "%" is a unit mark and is dropped on both sides: "50%" == "50" (but "0.5" != "50%": no x100).
- An integer gold answer must be matched exactly (1000 == "1000.0" == "1e3", 1000 != 1000.4);
  any other is matched within `rel_tol` of the gold value.
- Words after a number do not count: "1000 dollars" != 1000 (the prompt asks for the number).
- Any other gold answer is compared as text, ignoring case, runs of whitespace and the same
  surrounding decoration ("Paris" == " paris. ").
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from random import Random
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset

NAME = "qa_file"
FORMATS = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
ANSWER_FORMATS = ("auto", "gsm8k", "plain")
_SUPPORTED = ".jsonl, .json, .csv, .tsv or .parquet"
# Suffixes that make a name a file path rather than a hub dataset name.
_FILE_SUFFIXES = set(FORMATS) | {
    ".gz",
    ".txt",
    ".xlsx",
    ".xls",
    ".arrow",
    ".feather",
    ".pkl",
    ".pickle",
    ".zip",
    ".bz2",
    ".xz",
    ".zst",
    ".ndjson",
    ".yaml",
    ".yml",
    ".pq",
    ".md",
}
_UNSET = (None, "", "???")  # ??? is Hydra's "required" marker (config/dataset/qa_file.yaml)
_GSM8K_MARK = "####"


# ---------------------------------------------------------------------------------------------
# Matching


_MINUS_SIGNS = str.maketrans(
    {
        "\u2212": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\ufe63": "-",
        "\uff0d": "-",
        "\u00a0": " ",
        "\u2009": " ",
        "\u202f": " ",
    }
)
_WRAPPERS = [
    re.compile(p, re.DOTALL)
    for p in (
        r"\\boxed\{(.*)\}",
        r"\\text\{(.*)\}",
        r"\$\$(.*)\$\$",
        r"\$(.*)\$",
        r"\\\((.*)\\\)",
        r"\*\*(.*)\*\*",
        r"`(.*)`",
        r'"(.*)"',
        r"'(.*)'",
    )
]
_NUMBER = re.compile(
    r"(?P<sign1>[-+]?)\s*(?P<currency>[$€£¥₹]?)\s*(?P<sign2>[-+]?)\s*"
    r"(?P<body>\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 1,000 / 1,000.50
    r"|\d+/\d+"  # 3/4
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"  # 1000 / 1000.00 / 1000. / .5 / 1e3
    r"\s*(?P<percent>%?)"
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
            m = pattern.fullmatch(s)
            if m:
                s = m.group(1).strip()
        if s == before:
            break
    return s


@dataclass(frozen=True)
class Number:
    value: Fraction
    plain: bool  # written as a plain decimal (no %, fraction or exponent)
    decimal: str  # "1000", "-5", "1000.5": the plain spelling, for the stored answer


def parse_number(text: Any) -> Number | None:
    """'1,000', '$1000', '1000.00', '1e3', '3/4', '50%', '\u22125' -> their value; anything else -> None."""
    s = _clean(text)
    if len(s) > _MAX_CHARS:
        return None
    m = _NUMBER.fullmatch(s)
    if not m or (m["sign1"] and m["sign2"]):
        return None
    negative = (m["sign1"] or m["sign2"]) == "-"
    body = m["body"].replace(",", "")
    if "/" in body:
        num, den = body.split("/")
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
    else:
        try:
            dec = Decimal(body)
        except InvalidOperation:
            return None
        if abs(dec.adjusted()) > _MAX_EXPONENT:
            return None
        value = Fraction(dec)
    value = -value if negative else value
    plain = "/" not in body and "e" not in body.lower() and not m["percent"]
    decimal = ""
    if plain:
        decimal = format(Decimal(body), "f")  # '007' -> '7', '.5' -> '0.5', '1000.' -> '1000'
        if "." in decimal:
            decimal = decimal.rstrip("0").rstrip(".")
        decimal = "0" if value == 0 else ("-" if negative else "") + decimal
    return Number(value, plain, decimal)


def canonical_answer(text: Any) -> str:
    """The gold answer as stored: a plain decimal number written plainly ('1,000' -> '1000'), else cleaned
    text."""
    number = parse_number(text)
    return number.decimal if number is not None and number.plain else _clean(text)


def _normalise_text(text: Any) -> str:
    return _clean(text).casefold()


def match_answer(answer: Any, gold: Any, rel_tol: float = 1e-6) -> float:
    """1.0 when `answer` matches `gold` under the rules in the module docstring, else 0.0; never raises."""
    try:
        if answer is None or gold is None:
            return 0.0
        expected = parse_number(gold)
        if expected is None:
            return float(_normalise_text(answer) == _normalise_text(gold) != "")
        given = parse_number(answer)
        if given is None:
            return 0.0
        a, b = given.value, expected.value
        if a == b:
            return 1.0
        if b.denominator == 1:  # an integer gold answer is matched exactly
            return 0.0
        return float(abs(a - b) <= Fraction(rel_tol) * max(abs(a), abs(b)))
    except Exception:  # noqa: BLE001 - model text is arbitrary; a verifier must not crash training
        return 0.0


# ---------------------------------------------------------------------------------------------
# Loading


@dataclass
class _Table:
    source: str  # for messages: the path or "hub dataset 'x' (split 'train')"
    columns: list[str]
    n_rows: int
    data: Any  # {column: list} or a datasets.Dataset

    def column(self, name: str) -> list:
        return list(self.data[name])


def _looks_local(path: str) -> bool:
    suffixes = {s.lower() for s in Path(path).suffixes}
    return (
        path.startswith(("/", "./", "../", "~", ".\\"))
        or os.path.isabs(path)
        or "\\" in path
        or path.count("/") > 1
        or bool(suffixes & _FILE_SUFFIXES)
        or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", path)
    )


def _kind(path: Path) -> tuple[str | None, bool]:
    """('jsonl' | 'json' | 'csv' | 'tsv' | 'parquet' | None, gzipped)."""
    suffixes = [s.lower() for s in path.suffixes]
    gz = bool(suffixes) and suffixes[-1] == ".gz"
    ext = suffixes[-2] if gz and len(suffixes) > 1 else (suffixes[-1] if suffixes and not gz else "")
    kind = FORMATS.get(ext)
    return (None if gz and kind == "parquet" else kind), gz


def _rows_to_table(source: str, rows: list) -> _Table:
    columns: dict[str, None] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(  # noqa: TRY004 - bad user data, reported like every other config error
                f"path '{source}': row {i} is {type(row).__name__}, not an object with named columns"
            )
        columns.update(dict.fromkeys(map(str, row)))
    data = {c: [row.get(c) for row in rows] for c in columns}
    return _Table(source, list(columns), len(rows), data)


def _json_lines(source: str, text: str) -> list:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"path '{source}': line {lineno} is not valid JSON ({err.msg})") from None
    return rows


def _json_rows(source: str, text: str) -> list:
    """A list of objects, {"<key>": [objects]}, {column: [values]}, or JSON Lines in a .json file."""
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _json_lines(source, text)
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) == 1 and all(isinstance(r, dict) for r in lists[0]):
            return lists[0]
        if data and len(lists) == len(data) and len({len(v) for v in lists}) == 1:
            return [dict(zip(data, values)) for values in zip(*data.values())]
    raise ValueError(
        f"path '{source}': expected a JSON list of objects (or JSON Lines), "
        f"got a {type(data).__name__} of another shape"
    )


def _read_file(path: Path) -> _Table:
    source = str(path)
    kind, gz = _kind(path)
    if kind is None:
        raise ValueError(
            f"path '{source}': unsupported file type '{''.join(path.suffixes) or '(none)'}'; "
            f"use {_SUPPORTED}, or a hub dataset name"
        )
    if path.stat().st_size == 0:
        raise ValueError(f"path '{source}' is empty (0 bytes)")
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as err:  # noqa: BLE001 - pyarrow raises its own error types on a bad file
            raise ValueError(f"path '{source}' is not a readable Parquet file: {err}") from None
        return _Table(source, list(table.column_names), table.num_rows, table.to_pydict())
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if gz else raw).decode("utf-8-sig")
    except Exception as err:  # noqa: BLE001 - OSError, bad gzip (zlib.error, EOFError), not UTF-8
        raise ValueError(
            f"path '{source}' could not be read as {kind}{' (gzip)' if gz else ''} UTF-8 text: {err}"
        ) from None
    if kind == "jsonl":
        return _rows_to_table(source, _json_lines(source, text))
    if kind == "json":
        return _rows_to_table(source, _json_rows(source, text))
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if kind == "tsv" else ",")
    rows = list(reader)
    columns = [c for c in (reader.fieldnames or []) if c is not None]
    return _Table(source, columns, len(rows), {c: [r.get(c) for r in rows] for c in columns})


def _read_saved(path: Path, split: str) -> _Table:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception:  # noqa: BLE001
        raise ValueError(
            f"path '{path}' is a directory but not one written by datasets' save_to_disk; "
            f"point path at a file: {_SUPPORTED}"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"split '{split}' is not in '{path}'; its splits: {', '.join(ds)}")
        ds = ds[split]
    return _Table(f"{path} (split '{split}')", list(ds.column_names), len(ds), ds)


def _read_hub(name: str, subset: str | None, split: str) -> _Table:
    import datasets

    label = f"hub dataset '{name}'" + (f" (subset '{subset}')" if subset else "") + f", split '{split}'"
    try:
        ds = datasets.load_dataset(name, subset, split=split)
    except Exception as err:  # noqa: BLE001 - offline, unknown name, unknown split, missing subset...
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"path '{name}' is not a local file, and loading it as a {label} failed: {first}. Without "
            "internet a hub dataset loads only from the local HF cache; otherwise give a local file: "
            f"{_SUPPORTED}"
        ) from None
    return _Table(label, list(ds.column_names), len(ds), ds)


@lru_cache(maxsize=4)
def _load(key: tuple) -> _Table:
    kind, where, *rest = key
    if kind == "file":
        return _read_file(Path(where))
    if kind == "dir":
        return _read_saved(Path(where), rest[-1])
    return _read_hub(where, rest[0], rest[1])


def _source_key(path: Any, split: str = "train", subset: str | None = None) -> tuple:
    """What `path` names (a file, a save_to_disk dir or a hub dataset), as the cache key of its contents."""
    if path in _UNSET:
        raise ValueError(
            "path is not set: give a .jsonl/.json/.csv/.tsv/.parquet file or a hub dataset "
            f"name, e.g. dataset.tasks.{NAME}.config.path=/data/gsm8k.jsonl"
        )
    local = Path(str(path)).expanduser()
    if local.is_file():
        if split != "train":
            raise ValueError(
                f"split '{split}' applies to hub datasets and save_to_disk directories; a file is "
                "one split: point path at the file that holds it"
            )
        st = local.stat()
        return ("file", str(local.resolve()), st.st_mtime_ns, st.st_size)
    if local.is_dir():
        return ("dir", str(local.resolve()), local.stat().st_mtime_ns, split)
    if _looks_local(str(path)):
        raise ValueError(f"path '{path}' does not exist (expected a {_SUPPORTED} file or a hub dataset name)")
    return ("hub", str(path), subset, split)


def load_table(path: Any, split: str = "train", subset: str | None = None) -> _Table:
    """The file or hub dataset at `path`, read once per (path, modification time, split)."""
    return _load(_source_key(path, split, subset))


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@lru_cache(maxsize=8)
def _pairs_cached(key: tuple, question_column: str, answer_column: str, answer_format: str) -> tuple:
    return _extract_pairs(_load(key), question_column, answer_column, answer_format)


def _extract_pairs(table: _Table, question_column: str, answer_column: str, answer_format: str):
    """((question, final answer), ...) and the answer format used; every error names its key."""
    if table.n_rows == 0:
        raise ValueError(f"path '{table.source}' holds no rows (empty file)")
    for key, column in (("question_column", question_column), ("answer_column", answer_column)):
        if column not in table.columns:
            raise ValueError(
                f"{key} '{column}' is not a column of {table.source}; "
                f"its columns: {', '.join(table.columns) or '(none)'}"
            )
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
    return tuple(pairs), answer_format


# ---------------------------------------------------------------------------------------------
# The task


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
        if self.path not in _UNSET and not isinstance(self.path, (str, os.PathLike)):
            raise ValueError(f"path must be a file path or hub dataset name, got {self.path!r}")
        self.pairs()

    def pairs(self) -> tuple:
        """The (question, final answer) pairs of the source, in file order (cached)."""
        key = _source_key(self.path, self.split, self.subset)
        return _pairs_cached(key, self.question_column, self.answer_column, self.answer_format)[0]


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
