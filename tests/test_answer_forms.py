"""Every task's reference answer scores 1 however a model writes it: tagged, alone, with a full stop, in a
sentence.

For each registered task with a reference answer (all but `KNOWN_UNSCORABLE` and the code tasks): a few
entries built into training rows as grpo_recipes/train/data.py builds them (`TaskSet.sample`, `to_row`: the
metadata travels as JSON text), and the reference X written as

    tag:    "[ANSWER] X"   (a multi-line X on the lines below a bare `[ANSWER]`)
    alone:  "X"
    stop:   "X."
    phrase: "The answer is X."

judged by `TaskSet.judge` (the extraction and the task's own verifier: the path of the rewards and the
eval) in the answer_tag and plain formats. A (task, form) in `FORM_UNSCORABLE` is a strict xfail, so a fix
makes it leave the list.

Per entry, not per task (so not listed), one candidate per completion cannot tell some answers from other
things a model writes; with this sample every task passes every form:
- an answer that mixes words and numbers ("47 days, 12:11:05", a word list holding "52", a book sentence
  with "1.E.8") reads like prose with a number in it, which is `last_number`'s; "The answer is 34 days."
  reads 34 as "The answer is 17 apples." reads 17;
- a one-column matrix ("7\\n3") alone reads like working that ends in a number (`last_number`);
- a sentence answer that opens "Yes, ..." or "No, ..." reads as that verdict (`lead_word`).
"""

from __future__ import annotations

import functools

import pytest

from grpo_recipes.train.data import to_row
from tasks.registry import TaskSet, available_tasks, is_code_task
from tests import test_task_registry as registry_walk

# The registry walk's entries and task files (qa_file, code_file), shared rather than copied.
qa_path = registry_walk.qa_path  # a fixture
SEED = registry_walk.SEED

PROMPT_FORMATS = ("answer_tag", "plain")
# Fast subset, in the default run: a word answer, a number, a list, a grid, an expression, a sentence.
FAST = ("syllogism", "basic_arithmetic", "number_sorting", "rotate_matrix", "puzzle24", "knights_knaves")


def written(answer: str, form: str) -> str:
    if form == "tag":
        return "Let me work through this.\n[ANSWER]" + ("\n" if "\n" in answer else " ") + answer
    return {"alone": "{}", "stop": "{}.", "phrase": "The answer is {}."}[form].format(answer)


FORMS = ("tag", "alone", "stop", "phrase")
# (task, form) -> why that form of the task's reference cannot score. Empty: every task passes every form.
FORM_UNSCORABLE: dict[tuple[str, str], str] = {}

TASKS = [n for n in available_tasks() if n not in registry_walk.KNOWN_UNSCORABLE and not is_code_task(n)]


@functools.cache
def _taskset(name: str, prompt_format: str, qa_path: str) -> TaskSet:
    return TaskSet({name: {"config": registry_walk._config(name, qa_path)}}, prompt_format)


def _rows(name: str, qa_path: str) -> list[dict]:
    """The registry walk's entries (tests/test_task_registry.py) as training rows."""
    return [to_row(e, None) for e in registry_walk._sample(name, qa_path)[1]]


def _case(name: str, form: str):
    marks = [] if name in FAST else [pytest.mark.slow]
    reason = FORM_UNSCORABLE.get((name, form))
    if reason:
        marks.append(pytest.mark.xfail(reason=reason, strict=True))
    return pytest.param(name, form, marks=marks, id=f"{name}-{form}")


@pytest.mark.parametrize("name,form", [_case(n, f) for n in TASKS for f in FORMS])
def test_reference_scores_in_every_form(name, form, qa_path):
    rows = _rows(name, qa_path)
    assert rows and all(r["task"] == name for r in rows)
    failures = []
    for prompt_format in PROMPT_FORMATS:
        taskset = _taskset(name, prompt_format, qa_path)
        texts = [written(r["answer"], form) for r in rows]
        for text, row, (extraction, score) in zip(texts, rows, taskset.judge(texts, rows)):
            if score < 1.0:
                failures.append(
                    f"[{prompt_format}] {text!r} -> {extraction.answer!r} ({extraction.rule}) -> {score}"
                )
    assert not failures, "\n".join(failures)


def test_the_lists_name_registered_tasks_and_forms():
    assert set(FAST) <= set(TASKS)
    assert all(name in TASKS and form in FORMS for name, form in FORM_UNSCORABLE)
    assert all(isinstance(r, str) and r.strip() for r in FORM_UNSCORABLE.values())


def test_a_word_answer_at_the_start_scores_and_is_the_only_candidate(qa_path):
    # The 135M model's syllogism replies: "No." or "No, it does not logically follow ...".
    taskset = _taskset("syllogism", "answer_tag", qa_path)
    rows = [to_row(e, None) for e in taskset.sample(20, seed=1)]
    row = next(r for r in rows if r["answer"] == "No")
    texts = [
        "No.",
        "No, it does not logically follow from the premises.",
        "Yes, because all 3 premises hold.",
        "No, it does not follow. Then again, yes.",  # one candidate: the opening No, never a second try
        "Yes, it does not follow. Then again, no.",
    ]
    judged = taskset.judge(texts, [row] * len(texts))
    assert [(e.answer, e.rule, s) for e, s in judged] == [
        ("No", "lead_word", 1.0),
        ("No", "lead_word", 1.0),
        ("Yes", "lead_word", 0.0),
        ("No", "lead_word", 1.0),
        ("Yes", "lead_word", 0.0),
    ]


def test_a_sentence_answer_without_its_full_stop_is_the_same_answer():
    # emoji_mystery's references are sentences that end in "."; its verifier compares them exactly.
    taskset = TaskSet({"emoji_mystery": {}}, "plain")
    row = to_row(taskset.sample(1, seed=SEED)[0], None)
    reference, other = row["answer"], "A different sentence altogether."
    assert reference.endswith(".")
    judged = taskset.judge([reference, reference[:-1], other, other[:-1]], [row] * 4)
    assert [s for _, s in judged][:2] == [1.0, 1.0]
    assert max(s for _, s in judged[2:]) < 1.0
