"""Every task in the registry scores its own reference answer as correct through our path.

For each task: a few entries from its default config, the training row built from each (`to_row`),
and the reference answer written the way a model would in each tag format. That text must pass the
strict format check, and what the extraction takes from it must score >= 1.0 with the task's own
verifier, called on the row as the evaluator calls it (metadata as JSON text, answer as str).

How a reference is written:
- answer_tag, one-line answer:   "<reasoning>\\n[ANSWER] <answer>"
- answer_tag, multi-line answer: "<reasoning>\\n[ANSWER]\\n<answer lines>"   (grids, boards, moves)
- think: "<think>..</think><answer><answer></answer>", the answer on its own lines when multi-line
- code tasks: the program in a ```python block in the answer's place, extracted by `TaskSet.extract`

Tasks in `KNOWN_UNSCORABLE` (no reference answer to score) are strict xfails, so the list cannot go
stale. Generation is fast for every task (slowest, knight_swap and arc_agi: under 1 s for 3 entries),
so all use the same size; `qa_file` reads a small file written here, its only required config.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_common.formats import get_format
from grpo_recipes.train.data import system_prompt, to_row
from tasks.registry import TaskSet, available_tasks, is_code_task
from tests.conftest import declared

SIZE = 3
SEED = 20240607
FORMATS = ("answer_tag", "think")
# Tasks whose own reference answer cannot be scored as correct (each checked against the task's
# source in reasoning_gym/). They train and evaluate fine: their verifier accepts any valid
# solution. They are strict xfails here, so a fixed task must leave the list.
# Per entry, not per task (so not listed): an `ab` program that reduces to nothing has the answer ""
# and its verifier wants exactly "", which no extraction gives (an empty tag is no answer): ~0.3%
# of ab entries; gsm_symbolic's verifier reads "-1" as 1 (regex `\b-?\d+`), so a negative answer
# never scores: ~0.2% of its entries.
KNOWN_UNSCORABLE: dict[str, str] = {
    "boxnet": (
        "answer is None: any plan that moves the boxes is scored by simulation; no reference plan is stored"
    ),
    "graph_color": (
        "answer is None: any valid colouring scores 1 (metadata.possible_answer holds one, as a dict)"
    ),
    "propositional_logic": "answer is None: any conclusion that follows from the premises scores 1 "
    "(metadata.example_answer holds one)",
    "rubiks_cube": "answer is None: any move sequence that solves the cube scores 1 "
    "(metadata.example_correct_answer holds one)",
    "rush_hour": (
        "answer is None: any move sequence that frees the red car scores 1; no reference solution is stored"
    ),
}
QA_ROWS = [
    {"question": "What is 1,000 + 234?", "answer": "1,234"},
    {"question": "Name the capital of France.", "answer": "Paris"},
    {"question": "Compute 0.5 + 0.25.", "answer": "0.75"},
    {"question": "List the primes below 8.", "answer": "2, 3, 5, 7"},
]


CODE_ROWS = [
    {
        "question": "Write `double(x)`.",
        "entry_point": "double",
        "solution": "def double(x):\n    return 2 * x",
        "tests": ["assert candidate(2) == 4", "assert double(-1) == -2"],
    },
    {
        "question": "Write `first(xs)`.",
        "entry_point": "first",
        "solution": "def first(xs):\n    return xs[0]",
        "tests": ["assert candidate([3, 4]) == 3"],
    },
]


@pytest.fixture(scope="module")
def qa_path(tmp_path_factory):
    """The file tasks' required path: `<dir>/qa.jsonl` (qa_file) and `<dir>/code.jsonl` (code_file)."""
    root = tmp_path_factory.mktemp("qa")
    (root / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QA_ROWS))
    (root / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CODE_ROWS))
    return str(root)


def _config(name: str, qa_path: str) -> dict:
    files = {
        "qa_file": {"path": f"{qa_path}/qa.jsonl"},
        "code_file": {"path": f"{qa_path}/code.jsonl", "solution_column": "solution"},
    }
    return files.get(name, {})


@functools.cache
def _sample(name: str, qa_path: str) -> tuple[TaskSet, list[dict]]:
    taskset = TaskSet({name: {"config": _config(name, qa_path)}})
    return taskset, taskset.sample(SIZE, seed=SEED)


def written(answer: str, prompt_format: str, code: bool = False) -> str:
    """`answer` as a model following `prompt_format` would write it."""
    if code:
        answer = f"```python\n{answer.strip(chr(10))}\n```"
    multiline = "\n" in answer
    if prompt_format == "answer_tag":
        return "Let me work through this step by step.\n[ANSWER]" + ("\n" if multiline else " ") + answer
    if prompt_format == "think":
        body = f"\n{answer}\n" if multiline else answer
        return f"<think>Let me work through this step by step.</think>\n<answer>{body}</answer>"
    raise ValueError(prompt_format)


def _marks(name: str) -> list:
    reason = KNOWN_UNSCORABLE.get(name)
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


@pytest.mark.parametrize("prompt_format", FORMATS)
@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in available_tasks()])
def test_reference_answer_scores_through_our_path(name, prompt_format, qa_path):
    taskset, entries = _sample(name, qa_path)
    assert entries, f"{name}: no entries"
    system = system_prompt(declared("dataset", prompt_format=prompt_format))
    failures = []
    for entry in entries:
        assert entry["answer"] is not None, f"{name}: the entry has no reference answer"
        row = to_row(entry, system)
        user = row["prompt"][-1]
        assert user["role"] == "user" and isinstance(user["content"], str) and user["content"].strip()
        assert row["task"] == name

        text = written(row["answer"], prompt_format, code=is_code_task(name))
        assert get_format(prompt_format).is_formatted(text), (
            f"{name}: strict {prompt_format} rejects {text!r}"
        )
        extracted = taskset.extract(text, name)
        scored = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
        score = taskset.score(extracted.answer, scored)
        if score < 1.0:
            failures.append(
                f"reference {row['answer']!r} -> extracted {extracted.answer!r} ({extracted.rule}) "
                f"-> score {score}"
            )
    assert not failures, f"{name} [{prompt_format}]:\n" + "\n".join(failures)


def test_number_spelling_is_not_held_against_a_correct_answer():
    # The extraction writes "0.0" as "0"; codeio compares strings, so the reference's spelling is scored.
    taskset = TaskSet({"codeio": {}})
    entry = {"question": "q", "answer": "0.0", "metadata": json.dumps({"source_dataset": "codeio"})}
    assert taskset.score(taskset.extract("[ANSWER] 0.0", "codeio").answer, entry) == 1.0
    assert taskset.score("0.00", entry) == 1.0 and taskset.score("0.1", entry) == 0.0
    # Not a spelling of the same number: the verifier decides (advanced_geometry wants "0.480" as written).
    assert taskset.score("0", {**entry, "answer": "0.5"}) == 0.0


def test_known_unscorable_names_registered_tasks():
    assert set(KNOWN_UNSCORABLE) <= set(available_tasks())
    assert all(isinstance(r, str) and r.strip() and "\n" not in r for r in KNOWN_UNSCORABLE.values())


def test_the_code_tasks_module_loads_only_when_a_code_task_is_used():
    """A run without our own tasks never imports their modules; `python -m tasks` lists them all the same."""
    script = (
        "import sys\n"
        "from tasks import TaskSet, available_tasks\n"
        "TaskSet({'basic_arithmetic': {}}).sample(2, seed=0)\n"
        "own = {'tasks.code', 'tasks.python_functions', 'tasks.digits', 'tasks.qa_file', 'tasks.files'}\n"
        "assert not own & set(sys.modules)\n"
        "listed = {'humaneval', 'python_functions', 'code_file', 'sum_digits', 'reverse_digits', 'qa_file'}\n"
        "assert listed <= set(available_tasks())\n"
        "TaskSet({'python_functions': {}}).sample(2, seed=0)\n"
        "assert {'tasks.code', 'tasks.python_functions'} <= set(sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
