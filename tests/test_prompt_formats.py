"""A prompt format is one class plus one registry line; everything that reads answers asks it.

`Boxed` below is a format the project does not ship (the answer in `\\boxed{x}`): registered with
one line, it gives the system prompt, the extraction (TaskSet, the accuracy reward), the format
reward, tag_count, and the eval's and the report's rule names.
"""

import json
import re
from types import SimpleNamespace

import pytest

from grpo_common.formats import FORMATS, Extraction, PromptFormat, as_text, reader, rule_names
from grpo_recipes.evaluation.metrics import summarize
from grpo_recipes.outputs.report import write_report
from grpo_recipes.train.data import build_datasets, system_prompt, to_row
from rewards import RewardContext, build_rewards
from tasks import TaskSet
from tests.conftest import declared
from tests.test_evaluation import evaluator

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


class Boxed(PromptFormat):
    name = "boxed"
    system_prompt = "Solve the problem. Put the final answer in \\boxed{}."
    tags = ("\\boxed{",)
    rules = ("boxed", "none")

    def extract(self, text):
        found = [a.strip() for a in _BOXED.findall(as_text(text)) if a.strip()]
        return Extraction(found[-1], "boxed") if found else Extraction(None, "none")

    def is_formatted(self, text, strict=True):
        found = _BOXED.findall(text)
        return len(found) == 1 and text.rstrip().endswith("}") if strict else bool(found)


@pytest.fixture
def boxed(monkeypatch):
    monkeypatch.setitem(FORMATS, "boxed", Boxed())  # the registry line


def test_the_registry_holds_the_shipped_formats_in_order():
    assert list(FORMATS) == ["plain", "answer_tag", "think", "code"]
    assert all(name == fmt.name for name, fmt in FORMATS.items())
    assert rule_names() == [
        "tag",
        "phrase",
        "lead_word",
        "alone",
        "last_number",
        "answer_tag",
        "fenced",
        "raw",
        "none",
    ]


def test_code_tasks_are_read_as_code_whatever_the_prompt_format():
    for name in FORMATS:
        assert reader(name, code_task=True) is FORMATS["code"]
        assert reader(name, code_task=False) is (FORMATS["plain"] if name == "code" else FORMATS[name])
    taskset = TaskSet({"python_functions": {}, "sum_digits": {}}, "think")
    text = "<think>easy</think><answer>```python\ndef f(x):\n    return 2\n```</answer>"
    assert taskset.extract(text, "python_functions") == Extraction("def f(x):\n    return 2", "answer_tag")
    assert taskset.extract(text, "sum_digits").rule == "tag"  # another task: the think format's answer chain


def test_a_new_format_gives_its_system_prompt_and_extraction(boxed):
    assert system_prompt(declared("dataset", prompt_format="boxed")) == Boxed.system_prompt
    taskset = TaskSet({"sum_digits": {}}, "boxed")
    assert taskset.extract("1 + 2 = 3, so \\boxed{ 28 }", "sum_digits") == Extraction("28", "boxed")
    assert taskset.extract("the answer is 28", "sum_digits") == Extraction(None, "none")
    assert "boxed" in rule_names()


@pytest.mark.parametrize("with_taskset_judge", [True, False])
def test_a_new_format_drives_the_rewards(boxed, with_taskset_judge):
    taskset = TaskSet({"sum_digits": {}}, "boxed")
    row = to_row(taskset.sample(1, seed=0)[0], Boxed.system_prompt)
    answer = row["answer"]
    completions = [
        f"work \\boxed{{{answer}}}",
        f"\\boxed{{{answer}}} or \\boxed{{1}}",
        f"the answer is {answer}",
        "",
    ]
    ctx = RewardContext(taskset.score, "boxed", judge=taskset.judge if with_taskset_judge else None)
    funcs, _ = build_rewards(
        {
            "accuracy": {},
            "format": {},
            "soft": {"fn": "format", "mode": "soft"},
            "tag_count": {},
            "correct_and_format": {},
        },
        ctx,
    )
    columns = {k: [row[k]] * 4 for k in ("question", "answer", "metadata", "task")}
    got = {f.__name__: f(prompts=[None] * 4, completions=completions, **columns) for f in funcs}
    assert got == {
        "accuracy": [1.0, 0.0, 0.0, 0.0],
        "format": [1.0, 0.0, 0.0, 0.0],
        "soft": [1.0, 1.0, 0.0, 0.0],
        "tag_count": [1.0, 0.0, 0.0, 0.0],
        "correct_and_format": [1.0, -0.1, -0.1, -0.1],
    }


def test_a_new_format_reaches_the_eval_json_and_the_report(boxed, tiny, tmp_path, monkeypatch):
    _, tokenizer = tiny
    dataset = declared("dataset", tasks={"sum_digits": {}}, prompt_format="boxed", train_size=10)
    taskset, _, rows = build_datasets(dataset, {"size": 4, "seed": 7})
    assert rows[0]["prompt"][0] == {"role": "system", "content": Boxed.system_prompt}
    ev = evaluator(rows, taskset, tokenizer, "boxed", max_new_tokens=8)
    written = [f"\\boxed{{{rows[0]['answer']}}}", f"so \\boxed{{{rows[1]['answer']}}}", "the answer is 3", ""]
    monkeypatch.setattr(
        ev,
        "generate",
        lambda model, indices, sampled=False, progress=False, agree=None: [
            (written[i], 5, False, [1] * 5) for i in indices
        ],
    )
    accelerator = SimpleNamespace(process_index=0, num_processes=1, is_main_process=True)
    metrics, examples = ev.run(None, accelerator, step=0, out_dir=tmp_path / "eval_results")
    assert [e["rule"] for e in examples] == ["boxed", "boxed", "none", "none"]
    assert metrics["accuracy"] == 0.5 and metrics["format"] == 0.5
    rules = {k: v for k, v in metrics.items() if k.startswith("rule/")}
    assert rules == {"rule/boxed": 0.5, "rule/none": 0.5}
    saved = json.loads((tmp_path / "eval_results" / "eval_step_0.json").read_text())
    assert saved["metrics"]["sum_digits/rule/boxed"] == 0.5
    report = write_report(tmp_path).read_text()
    assert "Answers found at step 0 by rule: boxed: 50%, none: 50%." in report


def test_the_report_names_the_code_rules_of_a_code_run(tmp_path):
    def example(rule, correct):
        return {
            "index": 0,
            "task": "humaneval",
            "question": "q",
            "answer": "a",
            "completion": "c",
            "extracted": "x",
            "rule": rule,
            "score": float(correct),
            "correct": correct,
            "format_ok": True,
            "length": 3,
            "truncated": False,
        }

    examples = [
        example("fenced", True),
        example("fenced", False),
        example("raw", False),
        example("none", False),
    ]
    metrics = summarize(examples, prompt_format="think")
    assert [k for k in metrics if k.startswith("rule/")] == [
        "rule/tag",
        "rule/phrase",
        "rule/lead_word",
        "rule/alone",
        "rule/last_number",
        "rule/none",
        "rule/fenced",
        "rule/raw",
    ]
    (tmp_path / "eval_results").mkdir()
    (tmp_path / "eval_results" / "eval_step_0.json").write_text(
        json.dumps({"step": 0, "metrics": metrics, "examples": examples})
    )
    report = write_report(tmp_path).read_text()
    assert (
        "by rule: tag: 0%, phrase: 0%, lead_word: 0%, alone: 0%, last_number: 0%, fenced: 50%, raw: 25%, "
        "none: 25%."
    ) in report
