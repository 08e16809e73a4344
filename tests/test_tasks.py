from collections import Counter

import pytest

from grpo_common.errors import ConfigError
from tasks import TaskSet, available_tasks, task_config_keys, validate_tasks
from tasks.digits import digit_sum, reverse_digits


def test_digit_sum_example_from_the_spec():
    assert digit_sum([123, 45, 67]) == 28


@pytest.mark.parametrize("number,expected", [(1200, 21), (123456, 654321), (1000000, 1), (9876543, 3456789)])
def test_reverse_digits_drops_leading_zeros(number, expected):
    assert reverse_digits(number) == expected


def test_sum_digits_entries_follow_the_task_definition():
    entries = TaskSet({"sum_digits": {}}).sample(300, seed=3)
    for e in entries:
        numbers = e["metadata"]["numbers"]
        assert 2 <= len(numbers) <= 4 and all(10 <= n <= 999 for n in numbers)
        assert e["answer"] == str(digit_sum(numbers))
        assert str(numbers) in e["question"]


def test_reverse_digits_entries_follow_the_task_definition():
    for e in TaskSet({"reverse_digits": {}}).sample(300, seed=3):
        n = e["metadata"]["number"]
        assert 100_000 <= n <= 9_999_999
        assert e["answer"] == str(int(str(n)[::-1]))


def test_digit_tasks_score_integers_not_strings():
    ts = TaskSet({"sum_digits": {}})
    entry = {"question": "q", "answer": "28", "metadata": {"source_dataset": "sum_digits"}}
    assert ts.score("28", entry) == 1.0
    assert ts.score(" 0028 ", entry) == 1.0
    assert ts.score("27", entry) == 0.0
    assert ts.score("twenty-eight", entry) == 0.0
    assert ts.score(None, entry) == 0.0


def test_registry_holds_reasoning_gym_and_our_tasks():
    names = available_tasks()
    assert {"sum_digits", "reverse_digits", "basic_arithmetic", "syllogism", "puzzle24"} <= set(names)
    assert len(names) > 100
    assert "max_value" in task_config_keys("sum_digits") and "seed" not in task_config_keys("sum_digits")


def test_unknown_task_names_close_matches():
    with pytest.raises(ConfigError, match="unknown task 'game_of_24'.*puzzle24"):
        validate_tasks({"game_of_24": {}})
    with pytest.raises(ConfigError, match="basic_arithmetic"):
        validate_tasks({"basic_arithmetc": {}})


def test_unknown_task_config_key_lists_accepted_keys():
    with pytest.raises(
        ConfigError, match=r"syllogism.config: unknown key 'num_premises'.*Accepted keys: .*allow_all"
    ):
        validate_tasks({"syllogism": {"config": {"num_premises": 2}}})


def test_invalid_task_config_value_and_weight():
    with pytest.raises(ConfigError, match="sum_digits.config is invalid"):
        validate_tasks({"sum_digits": {"config": {"min_numbers": 5, "max_numbers": 2}}})
    for weight in (0, float("nan"), float("inf"), True):  # one line each, not reasoning-gym's traceback
        with pytest.raises(ConfigError, match="weight must be a positive number"):
            validate_tasks({"sum_digits": {"weight": weight}})
    with pytest.raises(ConfigError, match="unknown key"):
        validate_tasks({"sum_digits": {"wieght": 1}})


def test_mixture_weights_are_sampling_probabilities():
    ts = TaskSet({"sum_digits": {"weight": 3.0}, "reverse_digits": {"weight": 1.0}})
    counts = Counter(e["metadata"]["source_dataset"] for e in ts.sample(2000, seed=0))
    assert 0.70 < counts["sum_digits"] / 2000 < 0.80


def test_mixture_scores_each_entry_with_its_own_verifier():
    ts = TaskSet({"sum_digits": {}, "basic_arithmetic": {"config": {"max_terms": 2, "operators": ["+"]}}})
    for e in ts.sample(50, seed=1):
        assert ts.score(e["answer"], e) == 1.0


def test_sampling_is_deterministic_per_seed():
    ts = TaskSet({"basic_arithmetic": {}})
    assert ts.sample(20, seed=5) == ts.sample(20, seed=5)
    assert ts.sample(20, seed=5) != ts.sample(20, seed=6)


def test_sample_excludes_given_keys():
    ts = TaskSet({"basic_arithmetic": {"config": {"min_digits": 1, "max_digits": 1, "max_terms": 2}}})
    held = {ts.key(e) for e in ts.sample(30, seed=9)}
    assert not held & {ts.key(e) for e in ts.sample(500, seed=1, exclude_keys=held)}


def test_python_m_tasks_names_close_tasks_for_an_unknown_one():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "tasks", "game_of_24"], cwd=root, capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.strip().splitlines() == [done.stderr.strip()] and "Did you mean: puzzle24" in done.stderr
    )
