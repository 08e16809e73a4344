"""Code tasks (HumanEval, procedural Python functions), code extraction and the code_tests reward."""

import json

import pytest

from grpo_common.errors import ConfigError
from grpo_common.formats import get_format
from grpo_recipes.train.data import to_row
from rewards import RewardContext, build_rewards
from rewards.code import TestSuite, run_suites
from tasks import TaskSet, validate_tasks
from tasks.code import HumanEvalConfig, HumanEvalDataset, split_check


@pytest.mark.parametrize(
    "text, code, rule",
    [
        (
            "<think>easy</think><answer>```python\ndef f(x):\n    return x < 2\n```</answer>",
            "def f(x):\n    return x < 2",
            "answer_tag",
        ),
        ("<answer>def f(): pass</answer>", "def f(): pass", "answer_tag"),
        (
            "Sure:\n```python\ndef f(x):\n    return x\n```\nUse it:\n```python\nprint(f(1))\n```",
            "def f(x):\n    return x",
            "fenced",
        ),
        ("```\ndef g(): return 1\n```", "def g(): return 1", "fenced"),
        (
            "```python\ndef cut_off(x):\n    return",
            "def cut_off(x):\n    return",
            "fenced",
        ),  # truncated completion
        ("Here it is.\ndef h(y):\n    return y * 2", "def h(y):\n    return y * 2", "raw"),
        ("I don't know.", None, "none"),
        ("", None, "none"),
        (None, None, "none"),
    ],
)
def test_extract_code(text, code, rule):
    extraction = get_format("code").extract(text)
    assert (extraction.answer, extraction.rule) == (code, rule)


@pytest.fixture(scope="module")
def humaneval():
    ds = HumanEvalDataset(HumanEvalConfig(seed=0, size=164))
    return [ds[i] for i in range(164)], ds


def test_humaneval_has_all_164_problems_and_every_canonical_solution_passes(humaneval):
    entries, ds = humaneval
    assert len({e["metadata"]["task_id"] for e in entries}) == 164
    scores = ds.score_answers([e["answer"] for e in entries], entries)
    assert [e["metadata"]["task_id"] for e, s in zip(entries, scores) if s < 1.0] == []


def test_humaneval_scores_partial_body_only_and_wrong_solutions(humaneval):
    entries, ds = humaneval
    entry = next(e for e in entries if e["metadata"]["task_id"] == "HumanEval/0")
    body = entry["answer"][
        len(entry["metadata"]["code_prompt"]) :
    ]  # just the body, as a completion model writes
    stub = "def has_close_elements(numbers, threshold):\n    return True\n"  # right on 4 of 7 asserts
    scores = ds.score_answers(
        [body, stub, "def has_close_elements(numbers, threshold):\n    return None", None], [entry] * 4
    )
    assert scores == [1.0, pytest.approx(4 / 7), 0.0, 0.0]


def test_split_check_counts_only_statements_that_use_candidate():
    setup, steps = split_check(
        "METADATA = {}\n\ndef check(candidate):\n    import math\n    assert True\n"
        "    for x in range(3):\n        assert candidate(x) == x\n    assert candidate(1) == 1\n"
    )
    assert setup == "METADATA = {}"
    assert [counted for _, counted in steps] == [False, False, True, True]
    assert steps[2][0] == "for x in range(3):\n    assert candidate(x) == x"


def test_python_functions_are_deterministic_and_reference_solutions_pass():
    ts = TaskSet({"python_functions": {"config": {"num_tests": 4}}})
    a, b = ts.sample(30, seed=5), ts.sample(30, seed=5)
    assert a == b and ts.sample(30, seed=6) != a
    rows = [to_row(e, None) for e in a]
    judged = ts.judge([f"```python\n{r['answer']}```" for r in rows], rows)
    assert all(score == 1.0 and ex.rule == "fenced" for ex, score in judged)
    assert all(len(json.loads(r["metadata"])["tests"]) == 4 for r in rows)
    assert len({json.loads(r["metadata"])["template"] for r in rows}) >= 8  # a spread of templates


def test_python_functions_templates_are_validated():
    validate_tasks({"python_functions": {"config": {"templates": ["add_k", "square"]}}})
    with pytest.raises(ConfigError, match="unknown templates \\['sqaure'\\]"):
        validate_tasks({"python_functions": {"config": {"templates": ["sqaure"]}}})


def test_judge_mixes_code_and_answer_tasks():
    ts = TaskSet({"python_functions": {"config": {"templates": ["add_k"]}}, "sum_digits": {}})
    rows = [to_row(e, None) for e in ts.sample(12, seed=0)]
    texts = [
        f"```python\n{r['answer']}```" if r["task"] == "python_functions" else f"[ANSWER] {r['answer']}"
        for r in rows
    ]
    judged = ts.judge(texts, rows)
    assert {r["task"] for r in rows} == {"python_functions", "sum_digits"}
    assert all(score == 1.0 for _, score in judged)
    assert {ex.rule for ex, _ in judged} == {"fenced", "tag"}


def _reward(spec, max_tests=None):
    ts = TaskSet(
        {"python_functions": {"config": {"templates": ["add_k"], "num_tests": 5, "max_tests": max_tests}}}
    )
    funcs, _ = build_rewards(spec, RewardContext(ts.score, "code", judge=ts.judge))
    return funcs[0], [to_row(e, None) for e in ts.sample(4, seed=0)]


def _columns(rows):
    return {k: [r[k] for r in rows] for k in ("question", "answer", "metadata", "task")}


def test_code_tests_reward_fraction_plus_perfect_bonus():
    reward, rows = _reward({"code_tests": {"base_weight": 1.0, "perfect_bonus": 0.5}}, max_tests=3)
    row = rows[0]
    k = int(row["answer"].split("+ ")[1])
    name = json.loads(row["metadata"])["entry_point"]
    suite = TestSuite.from_metadata(row["metadata"]).limited(3)
    first_x = int(suite.tests[0][0].split("candidate(")[1].split(")")[0])
    completions = [
        f"```python\n{row['answer']}```",  # all 3 pass: 1 + 0.5
        f"```python\ndef {name}(x):\n    return {first_x + k} if x == {first_x} else 0\n```",  # 1 of 3
        "no code at all",
        [{"role": "assistant", "content": f"```python\n{row['answer']}```"}],  # chat form
    ]
    logged = {}
    out = reward(
        prompts=[None] * 4, completions=completions, **_columns([row] * 4), log_metric=logged.__setitem__
    )
    assert out[0] == pytest.approx(1.5) and out[3] == pytest.approx(1.5)
    # train stats: half of the completions pass every test; the group's rewards and programs differ
    assert logged == {
        "accuracy/python_functions": 0.5,
        "groups/reward_varied": 1.0,
        "groups/answer_varied": 1.0,
    }
    assert out[1] == pytest.approx(1 / 3)
    assert out[2] == 0.0


def test_code_tests_reward_is_none_for_non_code_rows_and_validates_options():
    reward, rows = _reward({"code_tests": {}})
    arithmetic = to_row(TaskSet({"basic_arithmetic": {}}).sample(1, seed=0)[0], None)
    completions = [f"```python\n{rows[0]['answer']}```", "[ANSWER] 3"]
    out = reward(prompts=[None] * 2, completions=completions, **_columns([rows[0], arithmetic]))
    assert out == [2.0, None]
    with pytest.raises(ConfigError, match="dataset.rewards.code_tests.base_weight must be a number"):
        _reward({"code_tests": {"base_weight": "x"}})
    with pytest.raises(
        ConfigError,
        match="code_tests.timeout: set it on the code task instead, dataset.tasks.<task>.config.test_timeout",
    ):
        _reward({"code_tests": {"timeout": 1.0}})
    with pytest.raises(ConfigError, match="max_tests must be a positive integer or null"):
        _reward({"code_tests": {}}, max_tests=0)


def test_one_verification_per_completion_shared_by_rewards_and_the_eval(monkeypatch):
    """code_tests and accuracy read one verdict per completion, from the task's verifier and suite; the
    eval's judge gives the same verdict without running the program again."""
    import tasks.code

    ts = TaskSet({"python_functions": {"config": {"templates": ["add_k"], "num_tests": 5, "max_tests": 3}}})
    funcs, _ = build_rewards(
        {"code_tests": {}, "accuracy": {}}, RewardContext(ts.score, "code", judge=ts.judge)
    )
    row = to_row(ts.sample(1, seed=0)[0], None)
    runs = []
    real = tasks.code.run_suites
    monkeypatch.setattr(tasks.code, "run_suites", lambda *a, **k: runs.append(len(a[0])) or real(*a, **k))
    completions = [f"```python\n{row['answer']}```", "```python\ndef f(x):\n    return 0\n```"] * 2
    assert [f(prompts=[None] * 4, completions=completions, **_columns([row] * 4)) for f in funcs] == [
        [2.0, 0.0] * 2,
        [1.0, 0.0] * 2,
    ]
    assert [extraction.rule for extraction, _ in ts.judge(completions, [row] * 4)] == ["fenced"] * 4
    assert runs == [2]  # the two distinct completions ran once, in one batch: none twice, none again
    assert ts.verifiers() == {
        "python_functions": "the fraction of at most 3 of each problem's tests (spread over "
        "the suite) that pass in the sandbox, 2 s per test"
    }


def test_max_tests_limits_the_tests_run():
    suite = TestSuite("f", tuple((f"assert candidate({i}) == {i}", True) for i in range(5)))
    assert suite.limited(2).num_tests == 2 and suite.limited(None).num_tests == 5
    # spread over the suite, not the first few (often the prompt's own examples)
    assert [src for src, _ in suite.limited(3).tests] == [f"assert candidate({i}) == {i}" for i in (0, 2, 4)]
    (outcome,) = run_suites(["def f(x):\n    return x"], [suite.limited(2)])
    assert (outcome.passed, outcome.total) == (2, 2)


def test_code_file_in_another_language_through_a_command_template(tmp_path):
    """A user's own problems in a language the sandbox learns from config (here: sh)."""
    from rewards import sandbox

    rows = [
        {
            "question": "Write a shell function `double` that prints twice its argument.",
            "tests": ['[ "$(double 3)" = 6 ]', '[ "$(double 0)" = 0 ]'],
        }
    ]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sandbox.configure(languages={"sh": {"command": ["/bin/sh", "{file}"], "extension": ".sh"}})
    try:
        ts = TaskSet({"code_file": {"config": {"path": str(path), "language": "sh"}}})
        row = to_row(ts.sample(1, seed=0)[0], None)
        judged = ts.judge(
            ["```sh\ndouble() { echo $(( $1 * 2 )); }\n```", "```sh\ndouble() { echo 6; }\n```"], [row, row]
        )
        assert [score for _, score in judged] == [1.0, 0.5]
    finally:
        sandbox.configure()
    with pytest.raises(ConfigError, match="tests_column 'checks' is not a column"):
        validate_tasks({"code_file": {"config": {"path": str(path), "tests_column": "checks"}}})
    # a CSV cell holds one test as a string: a shell test starts with `[` and is not a JSON list
    csv = tmp_path / "problems.csv"
    csv.write_text('question,tests\nWrite `double`.,"[ ""$(double 3)"" = 6 ]"\n')
    ts = TaskSet({"code_file": {"config": {"path": str(csv), "language": "sh"}}})
    assert TestSuite.from_metadata(ts.sample(1, seed=0)[0]["metadata"]).tests == (
        ('[ "$(double 3)" = 6 ]', True),
    )
    with pytest.raises(ConfigError, match="path is not set"):
        validate_tasks({"code_file": {"config": {}}})
