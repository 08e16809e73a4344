"""The eval problems themselves: every preset's fixed eval, transfer sets and per-level sets hold distinct
problems, none of them trained on by the hold-out key (`dataset.holdout`: the question, or a code task's
function or template); no code test is the prompt's own example; a space too small and a hold-out a task
cannot honour are refused. Built with data.py, no model."""

import functools
import json
import re
from collections import Counter

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.train.curriculum import build_curriculum_datasets
from grpo_recipes.train.data import build_datasets
from tasks.registry import TaskSet, holdout_key, normalised
from tests.test_config import composed

PRESETS = {
    "default": (),
    "digits": ("experiment=digits",),
    "digits reverse": ("experiment=digits", "dataset=reverse_digits"),
    "digits_source": ("experiment=digits_source",),
    "digits_source reverse": ("experiment=digits_source", "dataset=reverse_digits_source"),
    "code": ("experiment=code",),
    "code_source": ("experiment=code_source",),
    "gsm8k": ("experiment=gsm8k",),
    "gsm8k_source": ("experiment=gsm8k_source",),
    "rg_multitask": ("experiment=rg_multitask",),
    "rg_multitask_source": ("experiment=rg_multitask_source",),
    "python_functions": ("dataset=python_functions",),
    "humaneval": ("dataset=humaneval",),
}
# each preset's transfer sets: {key: task}
TRANSFER = {
    "default": {"three_term_addition": "basic_arithmetic"},
    "digits": {"recipe_range": "sum_digits"},
    "digits reverse": {"recipe_range": "reverse_digits"},
    "code": {"one_liners": "python_functions"},
    "gsm8k": {"leg_counting": "leg_counting"},
    "rg_multitask": {"three_term_chains": "chain_sum"},
}


def meta(row):
    return json.loads(row["metadata"])


def keys(rows, setting):
    return [holdout_key(r, setting) for r in rows]


def assert_examples_are_not_tests(rows):
    """A python_functions problem's example input is shown, recorded, and none of its tests."""
    for row in rows:
        m = meta(row)
        if m["source_dataset"] != "python_functions":
            continue
        shown = f"Example: {m['entry_point']}({m['example_input']!r}) returns {m['example_output']!r}."
        assert shown in row["question"]
        assert all(f"candidate({m['example_input']!r})" not in src for src, _ in m["tests"]), row["question"]


def holdout_by_task(dataset_cfg):  # what the eval JSON records: the taskset's holdout per task
    return TaskSet(dataset_cfg["tasks"], holdout=dataset_cfg["holdout"]).holdout


@functools.cache
def built(name):
    cfg = composed(*PRESETS[name])
    _, train, rows = build_datasets(cfg["dataset"], cfg["eval"])
    return cfg, train.to_list(), rows


@pytest.mark.parametrize("name", PRESETS)
def test_the_fixed_eval_holds_distinct_problems_none_of_them_trained_on(name):
    cfg, train, rows = built(name)
    setting, size = cfg["dataset"]["holdout"], cfg["eval"]["size"]
    fixed = [r for r in rows if "eval_set" not in r]
    assert Counter(r["task"] for r in fixed) == {t: size for t in cfg["dataset"]["tasks"]}
    assert len({normalised(r["question"]) for r in fixed}) == len(fixed)
    assert len(set(keys(fixed, setting))) == len(fixed)
    assert not set(keys(rows, setting)) & set(keys(train, setting))  # nor a transfer problem
    assert not {normalised(r["question"]) for r in rows} & {normalised(r["question"]) for r in train}


@pytest.mark.parametrize("name", PRESETS)
def test_transfer_sets_are_distinct_marked_and_apart_from_the_fixed_eval(name):
    cfg, _, rows = built(name)
    setting, size = cfg["dataset"]["holdout"], cfg["eval"]["size"]
    transfer = [r for r in rows if r.get("eval_set") == "transfer"]
    assert {r["transfer"]: r["task"] for r in transfer} == TRANSFER.get(name, {})
    assert Counter(r["transfer"] for r in transfer) == {key: size for key in TRANSFER.get(name, {})}
    fixed = [r for r in rows if "eval_set" not in r]
    assert all("transfer" not in r and "eval_level" not in r for r in fixed)
    assert len(set(keys(transfer, setting))) == len(transfer)
    assert not set(keys(transfer, setting)) & set(keys(fixed, setting))


def test_transfer_rows_are_scored_by_their_own_task_even_one_not_trained_on():
    cfg = composed("experiment=gsm8k")
    taskset, _, rows = build_datasets(cfg["dataset"], cfg["eval"])
    legs = [r for r in rows if r.get("eval_set") == "transfer"][:8]
    assert taskset.names == ["gsm_symbolic"] and {r["task"] for r in legs} == {"leg_counting"}
    assert [s for _, s in taskset.judge([r["answer"] for r in legs], legs)] == [1.0] * 8
    assert taskset.score(str(int(legs[0]["answer"]) + 1), legs[0]) == 0.0
    assert "leg_counting" in taskset.verifiers()


@pytest.mark.parametrize("name", ["code", "code_source", "python_functions", "humaneval"])
def test_code_evals_hold_distinct_functions_absent_from_training_and_no_example_is_a_test(name):
    cfg, train, rows = built(name)
    assert set(holdout_by_task(cfg["dataset"]).values()) == {"function"}
    functions = [meta(r)["entry_point"] for r in rows]
    assert len(set(functions)) == len(rows)  # clamp_5 at most once, whatever its example
    assert not set(functions) & {meta(r)["entry_point"] for r in train}
    assert_examples_are_not_tests(rows)
    assert_examples_are_not_tests(train[:200])
    if name == "code":  # the transfer set: templates it never trains on
        one_liners = {meta(r)["template"] for r in rows if r.get("eval_set") == "transfer"}
        assert not one_liners & {meta(r)["template"] for r in train}


def test_per_level_sets_are_disjoint_from_the_fixed_eval_from_each_other_and_from_training():
    cfg = composed(
        "experiment=digits", "dataset.curriculum.enabled=true", "dataset.curriculum.eval_per_level=8"
    )
    _, train, rows, curriculum = build_curriculum_datasets(cfg["dataset"], cfg["eval"])
    leveled = [r for r in rows if "eval_level" in r]
    assert Counter(r["eval_level"] for r in leveled) == {0: 8, 1: 8, 2: 8, 3: 8}
    held = [normalised(r["question"]) for r in rows]  # fixed (45), transfer (45) and per-level
    assert len(held) == len(set(held)) == 45 + 45 + 32
    # level 0 is the fixed eval's range: 45 + 8 of its 90 problems are held out, 37 left to train on
    assert {len(meta(r)["numbers"]) for r in leveled if r["eval_level"] == 0} == {1}
    for level in range(4):
        curriculum.problems.set_level("sum_digits", level)
        served = {normalised(train[i]["question"]) for i in range(len(train) if level == 0 else 200)}
        assert not served & set(held)
    assert len(served) > 100  # the top level: the recipe's range


def test_a_space_too_small_is_refused_with_the_number_available():
    cases = [
        (
            ("experiment=digits", "dataset.tasks.sum_digits.config.max_value=20"),
            (
                "eval.size=45: task 'sum_digits' has only 11 distinct problems in its configured range (4096 "
                "drawn); lower eval.size to at most 11 or widen dataset.tasks.sum_digits.config"
            ),
        ),
        (
            ("experiment=code", "dataset.holdout=template"),
            (
                "eval.size=48: task 'python_functions' has only 8 distinct templates in its configured range "
                "(4096 drawn); lower eval.size to at most 8 or widen dataset.tasks.python_functions.config, "
                "or hold out less: dataset.holdout=function"
            ),
        ),
        (
            (
                "experiment=digits",
                "eval.transfer.recipe_range.config={min_numbers: 1, max_numbers: 1, min_value: 100, "
                + "max_value: 120}",
            ),
            (
                "eval.size=45: transfer set 'recipe_range' (task 'sum_digits') has only 21 distinct problems "
                "outside the fixed eval (4096 drawn); lower eval.size to at most 21 or widen "
                "eval.transfer.recipe_range.config"
            ),
        ),
        (
            ("dataset=python_functions", "eval.size=200"),
            "task 'python_functions' has only 162 distinct functions",
        ),
    ]
    for overrides, message in cases:
        cfg = composed(*overrides)
        with pytest.raises(ConfigError, match=re.escape(message)):
            build_datasets(cfg["dataset"], cfg["eval"])
    cfg = composed(
        "experiment=digits", "dataset.curriculum.enabled=true", "dataset.curriculum.eval_per_level=50"
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "dataset.curriculum.eval_per_level=50: task 'sum_digits' at level 0 has only 45 distinct "
            "problems outside the fixed eval and the other levels' sets (4096 drawn); lower "
            "dataset.curriculum.eval_per_level to at most 45 or lower eval.size"
        ),
    ):
        build_curriculum_datasets(cfg["dataset"], cfg["eval"])


def test_a_holdout_a_task_cannot_honour_and_a_bad_transfer_set_are_refused():
    assert holdout_by_task(composed()["dataset"]) == {"basic_arithmetic": "question"}
    assert holdout_by_task(composed("experiment=code", "dataset.holdout=template")["dataset"]) == {
        "python_functions": "template"
    }
    cases = [
        (
            ("dataset.holdout=function",),
            (
                "dataset.holdout=function: task 'basic_arithmetic' is not a code task and has no function to "
                "hold out; it accepts question or auto"
            ),
        ),
        (("+eval.transfer.basic_arithmetic={}",), "eval.transfer.basic_arithmetic: a transfer set's key"),
        (
            ("eval.transfer.three_term_addition.task=basic_arithmetc",),
            (
                "eval.transfer.three_term_addition.task: unknown task 'basic_arithmetc'. Did you mean: "
                "basic_arithmetic"
            ),
        ),
        (
            ("+eval.transfer.three_term_addition.config.max_term=3",),
            "eval.transfer.three_term_addition.config: unknown key 'max_term'",
        ),
    ]
    for overrides, message in cases:
        cfg = composed(*overrides)
        with pytest.raises(ConfigError, match=re.escape(message)):
            build_datasets(cfg["dataset"], cfg["eval"])
    with pytest.raises(ConfigError, match="dataset.holdout=template: task 'sum_digits'"):
        holdout_by_task(composed("experiment=digits", "dataset.holdout=template")["dataset"])


def test_the_eval_is_refused_before_the_model_loads(monkeypatch):
    from grpo_recipes.train import assemble

    def no_model(*args):
        raise AssertionError("the model loaded before the eval sets were checked")

    monkeypatch.setattr(assemble, "get_model", no_model)
    cfg = composed("experiment=digits", "dataset.tasks.sum_digits.config.max_value=20")
    with pytest.raises(ConfigError, match="has only 11 distinct problems"):
        assemble.assemble(cfg, plan=None)


def test_transfer_sets_can_be_switched_off():
    cfg = composed("eval_sets@eval=none")
    assert cfg["eval"]["transfer"] == {} and cfg["eval"]["size"] == 128
    cfg = composed("eval.transfer.three_term_addition=null")
    assert all("eval_set" not in r for r in build_datasets(cfg["dataset"], cfg["eval"])[2])
