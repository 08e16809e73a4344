import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from reasoning_gym.factory import create_dataset

from grpo_common.errors import ConfigError
from grpo_recipes.train.data import build_datasets
from tasks import TaskSet, validate_tasks
from tasks.qa_file import canonical_answer, match_answer  # importing it registers qa_file
from tests.conftest import declared

CONFIG = Path(__file__).resolve().parents[1] / "config"


def gsm8k_rows(n: int) -> list[dict]:
    """GSM8K-shaped rows: a worked solution whose final answer follows '#### ' (with thousands commas)."""
    return [
        {
            "question": f"Tom has {i} boxes of 1000 pens. How many pens?",
            "answer": f"{i} * 1000 = {i * 1000}\n#### {i * 1000:,}",
            "id": i,
        }
        for i in range(1, n + 1)
    ]


def write(path: Path, rows: list[dict]) -> Path:
    name = path.name
    if name.endswith(".jsonl.gz"):
        path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in rows).encode()))
    elif name.endswith(".jsonl"):
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    elif name.endswith(".json"):
        path.write_text(json.dumps(rows))
    elif name.endswith((".csv", ".tsv")):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(
                f, fieldnames=list(rows[0]), delimiter="\t" if name.endswith(".tsv") else ","
            )
            writer.writeheader()
            writer.writerows(rows)
    elif name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def qa(path, **config) -> dict:
    return {"qa_file": {"config": {"path": str(path), **config}}}


@pytest.fixture
def gsm_file(tmp_path) -> Path:
    return write(tmp_path / "gsm8k.jsonl", gsm8k_rows(40))


@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz", "d.json", "d.csv", "d.tsv", "d.parquet"])
def test_every_format_gives_the_same_entries(tmp_path, name):
    path = write(tmp_path / name, gsm8k_rows(12))
    entries = TaskSet(qa(path)).sample(12, seed=0)
    assert sorted((e["metadata"]["row"], e["question"], e["answer"]) for e in entries) == [
        (i - 1, f"Tom has {i} boxes of 1000 pens. How many pens?", str(i * 1000)) for i in range(1, 13)
    ]
    assert {e["metadata"]["source_dataset"] for e in entries} == {"qa_file"}


def test_entries_hold_the_final_answer_and_the_row(gsm_file):
    rows = gsm8k_rows(40)
    ds = create_dataset("qa_file", path=str(gsm_file), seed=1, size=5)
    for i, e in enumerate(ds):
        row = e["metadata"]["row"]
        assert e["question"] == rows[row]["question"]
        assert e["answer"] == str((row + 1) * 1000)  # "#### 1,000" -> "1000"
        assert e["metadata"] == {"source_dataset": "qa_file", "source_index": i, "row": row}
        assert ds.score_answer(rows[row]["answer"].split("#### ")[1], e) == 1.0


def test_order_is_a_seeded_permutation_that_wraps(gsm_file):
    def rows(seed, size=80):
        return [
            e["metadata"]["row"] for e in create_dataset("qa_file", path=str(gsm_file), seed=seed, size=size)
        ]

    first = rows(3)
    assert sorted(first[:40]) == sorted(first[40:]) == list(range(40))  # each pass: every row once
    assert first[:40] != first[40:]  # reshuffled on the next pass
    assert first == rows(3) and first[:40] != rows(4)[:40] and first[:40] != list(range(40))
    assert (
        create_dataset("qa_file", path=str(gsm_file), seed=3, size=500)[123]["metadata"]["row"]
        == rows(3, size=124)[123]
    )


@pytest.mark.parametrize(
    "answer,gold,expected",
    [
        ("1000", "1000", 1.0),
        ("1,000", "1000", 1.0),
        ("1000.0", "1000", 1.0),
        ("$1000", "1000", 1.0),
        ("1000.00", "1000", 1.0),
        (" 1000 ", "1000", 1.0),
        ("1000.", "1000", 1.0),
        ("$1,000.00", "1,000", 1.0),
        ("1e3", "1000", 1.0),
        ("1E3", "1000", 1.0),
        ("\\boxed{1000}", "1000", 1.0),
        ("**1000**", "1000", 1.0),
        ("0.5", ".5", 1.0),
        ("0.75", "3/4", 1.0),
        ("007", "7", 1.0),
        ("+5", "5", 1.0),
        ("\u22125", "-5", 1.0),
        ("-5", "\u22125", 1.0),
        ("-$5", "-5", 1.0),
        ("$-5", "-5", 1.0),
        ("5", "-5", 0.0),
        ("50%", "50", 1.0),
        ("50", "50%", 1.0),
        ("0.5", "50%", 0.0),
        ("1000.4", "1000", 0.0),
        ("1001", "1000", 0.0),
        ("1000001", "1000000", 0.0),  # integers: exact
        ("3.1415927", "3.14159265", 1.0),
        ("3.1416", "3.14159265", 0.0),  # else: rel_tol 1e-6
        ("1000 dollars", "1000", 0.0),
        ("1 000", "1000", 0.0),
        ("one thousand", "1000", 0.0),
        ("", "1000", 0.0),
        ("Paris", "paris", 1.0),
        (" new   YORK. ", "New York", 1.0),
        ("London", "Paris", 0.0),
        ("", "", 0.0),
        ("1", "1,2", 0.0),
        ("1,2", "1,2", 1.0),
        (None, "1000", 0.0),
        (1000, "1000", 1.0),
    ],
)
def test_matching_table(answer, gold, expected):
    assert match_answer(answer, gold) == expected


def test_rel_tol_is_the_config_key(gsm_file, tmp_path):
    path = write(tmp_path / "pi.csv", [{"question": "pi?", "answer": "3.14159"}])
    entry = TaskSet(qa(path)).sample(1, seed=0)[0]
    assert TaskSet(qa(path)).score("3.14", entry) == 0.0
    assert TaskSet(qa(path, rel_tol=0.01)).score("3.14", entry) == 1.0


@pytest.mark.parametrize(
    "junk",
    [
        "",
        "\x00",
        "-",
        "$",
        "%",
        "1/0",
        "1e999999999",
        "9" * 5000,
        "nan",
        "inf",
        "{}",
        "[ANSWER]",
        "1," * 500,
        "(((",
        "\\boxed{",
        "$$",
        "🙂",
        "1/" + "9" * 3000,
    ],
)
def test_matching_never_raises(junk):
    for gold in ("1000", "2.5", "Paris", junk):
        assert match_answer(junk, gold) in (0.0, 1.0)
    assert isinstance(canonical_answer(junk), str)


def test_gold_answers_are_written_plainly():
    assert [canonical_answer(a) for a in [" 1,000", "$1,000.50", "-0.0", "1e3", "3/4", "**Paris.**"]] == [
        "1000",
        "1000.5",
        "0",
        "1e3",
        "3/4",
        "Paris",
    ]


def test_answer_formats(tmp_path):
    plain = write(
        tmp_path / "plain.csv", [{"q": "Capital of France?", "a": "Paris"}, {"q": "2+2?", "a": "4"}]
    )
    entries = TaskSet(qa(plain, question_column="q", answer_column="a")).sample(2, seed=0)
    assert sorted(e["answer"] for e in entries) == ["4", "Paris"]
    # gsm8k on demand; plain keeps the whole column even when it holds "####"
    gsm = write(tmp_path / "g.jsonl", gsm8k_rows(3))
    assert {e["answer"] for e in TaskSet(qa(gsm, answer_format="gsm8k")).sample(3, seed=0)} == {
        "1000",
        "2000",
        "3000",
    }
    whole = TaskSet(qa(gsm, answer_format="plain")).sample(3, seed=0)
    assert all("####" in e["answer"] for e in whole)


def _touch(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _error(tasks) -> str:
    with pytest.raises(ConfigError) as err:
        validate_tasks(tasks)
    message = str(err.value)
    assert message.startswith("dataset.tasks.qa_file.config is invalid: ") and "\n" not in message
    return message


def test_validation_messages(tmp_path, gsm_file):
    msg = _error(qa(tmp_path / "nope.jsonl"))
    assert "path '" in msg and "nope.jsonl' does not exist" in msg
    msg = _error(qa(_touch(tmp_path / "d.xlsx", "x")))
    assert "path '" in msg and "unsupported file type '.xlsx'" in msg and ".jsonl, .json, .csv" in msg
    msg = _error(qa(gsm_file, question_column="problem"))
    assert (
        "question_column 'problem' is not a column of" in msg and "its columns: question, answer, id" in msg
    )
    msg = _error(qa(gsm_file, answer_column="solution"))
    assert "answer_column 'solution'" in msg and "its columns: question, answer, id" in msg
    assert "is empty (0 bytes)" in _error(qa(_touch(tmp_path / "empty.jsonl", "")))
    assert "holds no rows" in _error(qa(_touch(tmp_path / "header.csv", "question,answer\n")))
    assert "holds no rows" in _error(qa(_touch(tmp_path / "blank.jsonl", "\n\n")))
    assert "path is not set" in _error({"qa_file": {"config": {}}})
    assert "path is not set" in _error(qa("???"))
    assert "answer_format 'latex' is not one of: auto, gsm8k, plain" in _error(
        qa(gsm_file, answer_format="latex")
    )
    assert "rel_tol must be a number" in _error(qa(gsm_file, rel_tol=-1))
    assert "split 'test' applies to hub datasets" in _error(qa(gsm_file, split="test"))
    assert "line 2 is not valid JSON" in _error(
        qa(_touch(tmp_path / "bad.jsonl", '{"question": "a"}\n{oops\n'))
    )
    plain = write(
        tmp_path / "mixed.jsonl", [{"question": "a", "answer": "1"}, {"question": "b", "answer": "x #### 2"}]
    )
    assert "row 0" in _error(qa(plain, answer_format="gsm8k")) and "answer_format=plain" in _error(
        qa(plain, answer_format="gsm8k")
    )
    assert "question_column 'question' is empty in row 1" in _error(
        qa(
            write(
                tmp_path / "blankq.jsonl",
                [{"question": "a", "answer": "1"}, {"question": " ", "answer": "2"}],
            )
        )
    )
    with pytest.raises(ConfigError, match="unknown key 'answer_col'.*Accepted keys: .*answer_column"):
        validate_tasks(qa(gsm_file, answer_col="answer"))


def test_hub_dataset_name_offline_and_cached(monkeypatch):
    import datasets

    def offline(name, subset=None, split=None):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    msg = _error(qa("openai/gsm8k", subset="main"))
    assert "path 'openai/gsm8k' is not a local file" in msg and "local HF cache" in msg and "Offline" in msg

    def cached(name, subset=None, split=None):
        assert (name, subset, split) == ("someone/cached_gsm8k", "main", "test")
        return datasets.Dataset.from_list(gsm8k_rows(5))

    monkeypatch.setattr(datasets, "load_dataset", cached)
    entries = TaskSet(qa("someone/cached_gsm8k", subset="main", split="test")).sample(5, seed=0)
    assert sorted(e["answer"] for e in entries) == ["1000", "2000", "3000", "4000", "5000"]


def test_mixes_with_a_reasoning_gym_task(gsm_file):
    ts = TaskSet({**qa(gsm_file), "basic_arithmetic": {"config": {"max_terms": 2, "operators": ["+"]}}})
    entries = ts.sample(200, seed=2)
    counts = Counter(e["metadata"]["source_dataset"] for e in entries)
    assert set(counts) == {"qa_file", "basic_arithmetic"} and 60 < counts["qa_file"] < 140
    for e in entries:
        assert ts.score(e["answer"], e) == 1.0
        assert ts.score("-12345", e) < 1.0
    e = next(e for e in entries if e["metadata"]["source_dataset"] == "qa_file")
    assert ts.score(f"${int(e['answer']):,}.00", e) == 1.0  # through the mixture's verifier routing
    assert ts.score(None, e) == 0.0


def test_eval_and_train_never_overlap_on_a_file(gsm_file):
    dataset_cfg = declared("dataset", tasks=qa(gsm_file), train_size=100)
    eval_cfg = {"size": 10, "seed": 12345}
    _, train, eval_rows = build_datasets(dataset_cfg, eval_cfg)
    eval_questions = {r["question"] for r in eval_rows}
    train_questions = set(train["question"])
    assert len(eval_questions) == 10 and not eval_questions & train_questions
    assert len(train_questions) == 30  # every other row (train_size > rows: the file is passed over again)
    assert json.loads(train[0]["metadata"])["source_dataset"] == "qa_file" and train[0]["task"] == "qa_file"
    _, _, again = build_datasets(dataset_cfg, eval_cfg)
    assert again == eval_rows


def test_gsm_symbolic_reference_answers_score_one_through_extraction():
    ts = TaskSet({"gsm_symbolic": {}})
    entries = ts.sample(40, seed=0)
    assert len({e["question"] for e in entries}) == 40
    for e in entries:
        extracted = ts.extract("Let me work it out step by step... [ANSWER] " + e["answer"], "gsm_symbolic")
        assert extracted.rule == "tag"
        assert ts.score(extracted.answer, e) == 1.0
    assert ts.score("-1", entries[0]) < 1.0


def composed(*overrides: str) -> dict:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG)):
        cfg = compose("train", overrides=list(overrides))
    cfg.output_dir = "/tmp/unused"
    return OmegaConf.to_container(cfg, resolve=True)


def test_dataset_options_gsm8k_and_qa_file(gsm_file):
    gsm = composed("dataset=gsm8k")["dataset"]
    assert list(gsm["tasks"]) == ["gsm_symbolic"] and gsm["prompt_format"] == "answer_tag"
    assert gsm["rewards"] == {
        "accuracy": {"weight": 1.0, "mode": "binary"},
        "format": {"weight": 0.1, "mode": "strict"},
    }
    validate_tasks(gsm["tasks"])
    # qa_file: a missing path is one line naming the key to set
    with pytest.raises(
        ConfigError,
        match=r"^dataset.tasks.qa_file.config is invalid: path is not set.*"
        r"dataset.tasks.qa_file.config.path=",
    ):
        validate_tasks(composed("dataset=qa_file")["dataset"]["tasks"])
    cfg = composed("dataset=qa_file", f"dataset.tasks.qa_file.config.path={gsm_file}")
    assert cfg["run_name"].startswith("qa_file-")
    validate_tasks(cfg["dataset"]["tasks"])
