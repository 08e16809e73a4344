"""dataset.curriculum: the level controller, the digits curricula, training problems drawn at the current
level, the verdicts that drive it, and the config checks."""

import json

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config.checks import check_config
from rewards import RewardContext, build_rewards
from tasks import TaskSet
from tasks.difficulty import LevelController, VerdictRecorder, config_at, top_level
from tasks.digits import ReverseDigitsConfig, SumDigitsConfig, digit_sum
from tasks.leveled import LeveledTasks
from tests.test_config import composed


def verdicts(task, level, pattern):
    return [(task, level, bool(ok)) for ok in pattern]


# --- the level controller ---


def test_a_level_rises_once_a_full_window_reaches_raise_at():
    c = LevelController({"t": 3}, raise_at=0.75, lower_at=0.25, window=4)
    assert c.observe(verdicts("t", 0, [1, 1, 1])) == {}  # 3/3 correct, but the window is not full
    assert c.observe(verdicts("t", 0, [0])) == {"t": 1}  # 3/4 = 0.75 >= raise_at
    assert c.levels == {"t": 1} and list(c.windows["t"]) == []  # the new level starts with an empty window
    assert c.observe(verdicts("t", 1, [1, 1, 0, 0])) == {}  # 0.5: between the thresholds
    assert c.levels == {"t": 1}


def test_a_level_falls_below_lower_at_and_stays_between():
    c = LevelController({"t": 3}, start_level=2, raise_at=0.75, lower_at=0.25, window=4)
    assert c.observe(verdicts("t", 2, [1, 0, 0, 0])) == {}  # 0.25 is not below lower_at
    assert c.observe(verdicts("t", 2, [0])) == {"t": 1}  # the rolling window: 0/4 after the fifth
    assert c.observe(verdicts("t", 1, [1, 0] * 20)) == {}  # 0.5 all along: no move
    assert c.levels == {"t": 1}


def test_levels_are_clamped_to_the_curriculum():
    c = LevelController({"t": 1}, start_level=5, raise_at=0.5, lower_at=0.5, window=2)
    assert c.levels == {"t": 1}  # start_level above the top: the top
    assert c.observe(verdicts("t", 1, [1] * 10)) == {}  # at the top: stays
    assert c.observe(verdicts("t", 1, [0, 0])) == {"t": 0}
    assert c.observe(verdicts("t", 0, [0] * 10)) == {}  # at level 0: stays
    assert c.levels == {"t": 0}


def test_one_move_per_batch_and_only_verdicts_at_the_current_level_count():
    c = LevelController({"a": 3, "b": 3}, raise_at=0.5, lower_at=0.0, window=2)
    # a's problems drawn at level 0 after the rise (prefetched) do not fill level 1's window
    assert c.observe(
        verdicts("a", 0, [1] * 6) + verdicts("fixed", 0, [1] * 6) + verdicts("b", 2, [1] * 6)
    ) == {"a": 1}
    assert c.levels == {"a": 1, "b": 0} and list(c.windows["a"]) == []


def test_state_round_trips_levels_and_windows():
    c = LevelController({"t": 4}, raise_at=0.5, lower_at=0.1, window=3)
    c.observe(verdicts("t", 0, [1, 1, 1]) + verdicts("t", 1, [1, 0]))
    restored = LevelController({"t": 4}, raise_at=0.5, lower_at=0.1, window=3)
    restored.load_state(json.loads(json.dumps(c.state())))  # as trainer_state.json holds it
    assert restored.levels == c.levels == {"t": 1}
    assert list(restored.windows["t"]) == list(c.windows["t"]) == [True, False]
    assert restored.observe(verdicts("t", 1, [1])) == c.observe(verdicts("t", 1, [1])) == {"t": 2}


# --- the digits curricula ---


def test_digits_curricula_run_from_easy_to_the_task_defaults():
    assert top_level("sum_digits") == 3 and top_level("reverse_digits") == 5
    assert top_level("qa_file") is None  # a task without a curriculum
    assert config_at("sum_digits", 0, {}) == {  # the sum_digits dataset's own problems
        "min_numbers": 1,
        "max_numbers": 1,
        "min_value": 10,
        "max_value": 99,
    }
    assert config_at("sum_digits", 1, {}) == {
        "min_numbers": 2,
        "max_numbers": 2,
        "min_value": 1,
        "max_value": 99,
    }
    assert config_at("reverse_digits", 0, {}) == {"min_value": 10, "max_value": 99}
    assert config_at("reverse_digits", 1, {}) == {"min_value": 10, "max_value": 999}
    defaults = {k: v for k, v in vars(SumDigitsConfig()).items() if k not in ("seed", "size")}
    assert config_at("sum_digits", 3, {}) == defaults
    assert config_at("reverse_digits", 5, {}) == {"min_value": 100_000, "max_value": 9_999_999}
    assert vars(ReverseDigitsConfig())["max_value"] == 9_999_999


def test_digits_problems_at_level_zero_and_at_the_top():
    spec = TaskSet({"sum_digits": {}, "reverse_digits": {}}).spec
    easy = LeveledTasks(spec, {"sum_digits": 0, "reverse_digits": 0}, size=200, seed=1)
    top = LeveledTasks(spec, {"sum_digits": 3, "reverse_digits": 5}, size=200, seed=1)
    for problems, sums, reverse in (
        (easy, (1, 1, 10, 99), (10, 99)),
        (top, (2, 4, 10, 999), (100_000, 9_999_999)),
    ):
        entries = [problems[i] for i in range(200)]
        for e in entries:
            meta = e["metadata"]
            if meta["source_dataset"] == "sum_digits":
                assert sums[0] <= len(meta["numbers"]) <= sums[1]
                assert all(sums[2] <= n <= sums[3] for n in meta["numbers"])
                assert e["answer"] == str(digit_sum(meta["numbers"]))
            else:
                assert reverse[0] <= meta["number"] <= reverse[1]
        assert {e["metadata"]["source_dataset"] for e in entries} == {"sum_digits", "reverse_digits"}
    # the top level draws exactly what the task draws without a curriculum
    assert [top[i]["question"] for i in range(50)] == [
        e["question"] for e in TaskSet(spec).sample(50, seed=1)
    ]


# --- training problems on the fly ---


def test_the_same_index_gives_the_same_problem_within_a_level_and_a_harder_one_after_a_raise():
    spec = TaskSet({"reverse_digits": {}}).spec
    problems = LeveledTasks(spec, {"reverse_digits": 0}, size=64, seed=3)
    first = [problems[i] for i in range(64)]
    again = LeveledTasks(spec, {"reverse_digits": 0}, size=64, seed=3)
    assert [problems[i] for i in range(64)] == first == [again[i] for i in range(64)]
    assert {e["level"] for e in first} == {0}
    problems.set_level("reverse_digits", 3)
    raised = [problems[i] for i in range(64)]
    assert {e["level"] for e in raised} == {3}
    assert all(1_000 <= e["metadata"]["number"] <= 99_999 for e in raised)
    assert max(e["metadata"]["number"] for e in first) <= 99
    assert [problems[i] for i in range(64)] == raised


def test_held_out_questions_are_redrawn_never_served():
    spec = TaskSet({"sum_digits": {}}).spec
    # level 1 (two numbers of 1..99): enough distinct questions that no kept one repeats a held-out one
    plain = LeveledTasks(spec, {"sum_digits": 1}, size=100, seed=5)
    held_out = {plain[i]["question"] for i in range(0, 100, 2)}  # every other problem
    problems = LeveledTasks(spec, {"sum_digits": 1}, size=100, seed=5, exclude=held_out)
    served = [problems[i]["question"] for i in range(100)]
    assert not set(served) & held_out
    assert served[1::2] == [plain[i]["question"] for i in range(1, 100, 2)]  # the rest are untouched


def test_curriculum_datasets_keep_the_fixed_eval_and_draw_rows_at_the_level():
    from grpo_recipes.train.curriculum import build_curriculum_datasets
    from grpo_recipes.train.data import build_datasets

    cfg = composed(
        "dataset=sum_digits_source",
        "dataset.curriculum.enabled=true",
        "dataset.train_size=64",
        "eval.size=50",
    )
    _, _, fixed_eval = build_datasets(cfg["dataset"], cfg["eval"])
    _, train, eval_rows, curriculum = build_curriculum_datasets(cfg["dataset"], cfg["eval"])
    assert eval_rows == fixed_eval  # built from the config as written (2-4 numbers of 10..999)
    assert any(len(json.loads(r["metadata"])["numbers"]) > 2 for r in eval_rows)
    assert len(train) == 64 and curriculum.fixed == []
    rows = [train[i] for i in range(64)]
    assert rows[5] == train[5]  # TRL fetches a group's completions by the same index
    assert {r["level"] for r in rows} == {0} and {r["task"] for r in rows} == {"sum_digits"}
    assert all(len(json.loads(r["metadata"])["numbers"]) == 1 for r in rows)  # level 0: one number
    assert rows[0]["prompt"][-1] == {"role": "user", "content": rows[0]["question"]}
    assert not {r["question"] for r in rows} & {r["question"] for r in eval_rows}
    curriculum.problems.set_level("sum_digits", 3)
    assert {train[i]["level"] for i in range(8)} == {3}


def test_per_level_eval_sets_are_drawn_at_each_level_and_held_out_of_training():
    from grpo_recipes.train.curriculum import build_curriculum_datasets

    on = ("dataset=sum_digits_source", "dataset.curriculum.enabled=true", "dataset.train_size=64")
    plain = composed(*on, "eval.size=10")
    cfg = composed(*on, "eval.size=10", "dataset.curriculum.eval_per_level=5")
    fixed = build_curriculum_datasets(plain["dataset"], plain["eval"])[2]
    _, train, eval_rows, curriculum = build_curriculum_datasets(cfg["dataset"], cfg["eval"])
    assert eval_rows[:10] == fixed and all("eval_level" not in r for r in fixed)  # the fixed eval, unchanged
    leveled = eval_rows[10:]
    assert [r["eval_level"] for r in leveled] == [lv for lv in range(4) for _ in range(5)]  # levels 0..3
    numbers = [len(json.loads(r["metadata"])["numbers"]) for r in leveled]
    assert set(numbers[:5]) == {1} and max(numbers[15:]) > 2  # level 0: one number; the top: the recipe's
    assert build_curriculum_datasets(cfg["dataset"], cfg["eval"])[2] == eval_rows  # the same every run
    held_out = {r["question"] for r in eval_rows}
    for level in range(4):  # no level's training problems include an eval problem
        curriculum.problems.set_level("sum_digits", level)
        assert not {train[i]["question"] for i in range(64)} & held_out


# --- the verdicts that drive the levels ---


def test_only_the_first_judging_reward_reports_verdicts_and_levels_are_logged():
    ts = TaskSet({"sum_digits": {}})
    recorder = VerdictRecorder(lambda: {"sum_digits": 2})
    ctx = RewardContext(scorer=ts.score, prompt_format="answer_tag", judge=ts.judge, on_verdicts=recorder)
    funcs, _ = build_rewards({"accuracy": {}, "correct_and_format": {}, "format": {}}, ctx)
    logged = {}
    columns = {
        "question": ["q"] * 3,
        "answer": ["28"] * 3,
        "metadata": [json.dumps({"source_dataset": "sum_digits"})] * 3,
        "task": ["sum_digits"] * 3,
        "level": [2, 2, 1],
        "log_metric": logged.__setitem__,
    }
    completions = [[{"role": "assistant", "content": t}] for t in ("[ANSWER] 28", "[ANSWER] 27", "28")]
    for fn in funcs:
        fn(prompts=[[]] * 3, completions=completions, **columns)
    assert recorder.take() == [("sum_digits", 2, True), ("sum_digits", 2, False), ("sum_digits", 1, True)]
    assert recorder.take() == []
    assert logged["curriculum/sum_digits/level"] == 2.0 and logged["accuracy/sum_digits"] == pytest.approx(
        2 / 3
    )


# --- config checks ---


def test_the_curriculum_settings_are_checked_with_clear_messages():
    on = ("dataset=sum_digits", "dataset.curriculum.enabled=true")
    check_config(composed(*on))  # the defaults pass
    cases = [
        (("dataset.curriculum.lower_at=0.8",), "lower_at=0.8 is above raise_at=0.7"),
        (
            ("dataset.curriculum.raise_at=1.5",),
            r"dataset.curriculum.raise_at=1.5: expected a number >= 0 and <= 1",
        ),
        (("dataset.curriculum.window=0",), "dataset.curriculum.window=0: expected an integer >= 1"),
        (("+dataset.curriculum.max_level=2",), "dataset.curriculum.max_level: unknown key"),
        (("~dataset.tasks.sum_digits", "+dataset.tasks.gsm_symbolic={}"), "no task of dataset.tasks"),
        (("dataset.rewards.accuracy=null",), "needs a reward that judges every completion"),
        (("+grpo.dataloader_num_workers=2",), "grpo.dataloader_num_workers=2"),
        (("dataset.curriculum.eval_per_level=-1",), "eval_per_level=-1: expected an integer >= 0"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            check_config(composed(*on, *overrides))
    with pytest.raises(ConfigError, match="eval_per_level=4 needs dataset.curriculum.enabled=true"):
        check_config(composed("dataset=sum_digits", "dataset.curriculum.eval_per_level=4"))
