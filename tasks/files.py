"""The file tasks' loader (qa_file, code_file): a table of rows from a local .jsonl, .json, .csv, .tsv or
.parquet file (the text ones may be gzipped: .jsonl.gz), a `datasets.save_to_disk` directory, or a hub dataset
name (`datasets.load_dataset`, offline only from the local HF cache). Each error is one line."""

import csv
import gzip
import io
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from grpo_common.errors import first_line

FORMATS = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
SUPPORTED = ".jsonl, .json, .csv, .tsv or .parquet"
UNSET = (None, "", "???")  # ??? is Hydra's "required" marker (config/dataset/*.yaml)
# Suffixes that make a name a file path rather than a hub dataset name (read, or refused with a message).
_FILE_SUFFIXES = set(FORMATS) | {".gz", ".zip", ".bz2", ".xz", ".zst", ".ndjson", ".pq", ".arrow", ".feather"}
_FILE_SUFFIXES |= {".txt", ".md", ".yaml", ".yml", ".xlsx", ".xls", ".pkl", ".pickle"}
_HUB_NAME = re.compile(r"[\w.-]+(/[\w.-]+)?")


@dataclass
class Table:
    source: str  # for messages: the path or "hub dataset 'x' (split 'train')"
    columns: list[str]
    n_rows: int
    data: Any  # {column: list} or a datasets.Dataset

    def column(self, name: str | None) -> list:
        """The column's values; None in every row for a column the table lacks."""
        return list(self.data[name]) if name and name in self.columns else [None] * self.n_rows

    def require(self, **columns: str) -> None:
        """Rows, and every column named (`question_column="q"`); the message names the config key."""
        if self.n_rows == 0:
            raise ValueError(f"path '{self.source}' holds no rows (empty file)")
        for key, column in columns.items():
            if column not in self.columns:
                raise ValueError(
                    f"{key} '{column}' is not a column of {self.source}; "
                    f"its columns: {', '.join(self.columns) or '(none)'}"
                )


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


def _read_file(path: Path) -> Table:
    source, suffixes = str(path), [s.lower() for s in path.suffixes]
    gz = suffixes[-1:] == [".gz"]
    kind = FORMATS.get("".join(suffixes[-2:-1] if gz else suffixes[-1:]))
    if kind is None or (gz and kind == "parquet"):
        raise ValueError(
            f"path '{source}': unsupported file type '{''.join(path.suffixes) or '(none)'}'; "
            f"use {SUPPORTED}, or a hub dataset name"
        )
    if path.stat().st_size == 0:
        raise ValueError(f"path '{source}' is empty (0 bytes)")
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as err:  # noqa: BLE001 - pyarrow raises its own error types on a bad file
            raise ValueError(f"path '{source}' is not a readable Parquet file: {err}") from None
        return Table(source, list(table.column_names), table.num_rows, table.to_pydict())
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if gz else raw).decode("utf-8-sig")
    except Exception as err:  # noqa: BLE001 - OSError, bad gzip (zlib.error, EOFError), not UTF-8
        raise ValueError(
            f"path '{source}' could not be read as {kind}{' (gzip)' if gz else ''} UTF-8 text: {err}"
        ) from None
    if kind in ("jsonl", "json"):
        rows = (_json_lines if kind == "jsonl" else _json_rows)(source, text)
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ValueError(  # noqa: TRY004 - bad user data, reported like every other config error
                    f"path '{source}': row {i} is {type(row).__name__}, not an object with named columns"
                )
        columns = list(dict.fromkeys(column for row in rows for column in row))
    else:
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if kind == "tsv" else ",")
        rows = list(reader)
        columns = [c for c in (reader.fieldnames or []) if c is not None]
    return Table(source, columns, len(rows), {c: [row.get(c) for row in rows] for c in columns})


@lru_cache(maxsize=4)
def read(key: tuple) -> Table:
    """The table a `source_key` names, read once per key."""
    kind, where, *rest = key
    if kind == "file":
        return _read_file(Path(where))
    import datasets

    if kind == "dir":
        split = rest[-1]
        try:
            ds = datasets.load_from_disk(where)
        except Exception:  # noqa: BLE001
            raise ValueError(
                f"path '{where}' is a directory but not one written by datasets' save_to_disk; "
                f"point path at a file: {SUPPORTED}"
            ) from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"split '{split}' is not in '{where}'; its splits: {', '.join(ds)}")
            ds = ds[split]
        return Table(f"{where} (split '{split}')", list(ds.column_names), len(ds), ds)
    subset, split = rest
    label = f"hub dataset '{where}'" + (f" (subset '{subset}')" if subset else "") + f", split '{split}'"
    try:
        ds = datasets.load_dataset(where, subset, split=split)
    except Exception as err:  # noqa: BLE001 - offline, unknown name, unknown split, missing subset...
        raise ValueError(
            f"path '{where}' is not a local file, and loading it as a {label} failed: {first_line(err)}. "
            "Without internet a hub dataset loads only from the local HF cache; otherwise give a local file: "
            f"{SUPPORTED}"
        ) from None
    return Table(label, list(ds.column_names), len(ds), ds)


def source_key(path: Any, split: str = "train", subset: str | None = None) -> tuple:
    """What `path` names (a file, a save_to_disk dir or a hub dataset), as the cache key of its contents."""
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
    # a path, not a hub name ('owner/name'): './x', a file suffix, or what a hub id cannot hold ('~')
    path, suffixes = str(path), {s.lower() for s in Path(str(path)).suffixes}
    if path.startswith(("./", "../")) or suffixes & _FILE_SUFFIXES or not _HUB_NAME.fullmatch(path):
        raise ValueError(f"path '{path}' does not exist (expected a {SUPPORTED} file or a hub dataset name)")
    return ("hub", str(path), subset, split)
