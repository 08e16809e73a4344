import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_common.errors import ConfigError
from grpo_common.formats import FORMATS
from rewards import RewardContext, build_rewards
from tasks import TaskSet

TS = TaskSet({"sum_digits": {}})
META = json.dumps({"source_dataset": "sum_digits"})


def call(fn, texts, answers):
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    n = len(texts)
    return fn(
        prompts=[[]] * n,
        completions=completions,
        completion_ids=[[]] * n,
        answer=answers,
        metadata=[META] * n,
        question=["q"] * n,
        task=["sum_digits"] * n,
    )


def rewards_for(spec, prompt_format="answer_tag"):
    return build_rewards(spec, RewardContext(scorer=TS.score, prompt_format=prompt_format))


def test_accuracy_modes():
    texts = ["[ANSWER] 28", "the answer is 27", "nothing", ""]
    for mode, expected in [("binary", [1, 0, 0, 0]), ("signed", [1, -1, -1, -1]), ("graded", [1, 0, 0, 0])]:
        (fn,), _ = rewards_for({"accuracy": {"mode": mode}})
        assert call(fn, texts, ["28"] * 4) == expected


def test_format_strict_and_soft():
    assert FORMATS["answer_tag"].is_formatted("7 + 5 = 12\n[ANSWER] 12", strict=True)
    assert not FORMATS["answer_tag"].is_formatted("[ANSWER] 12 and then more text\nmore", strict=True)
    assert FORMATS["answer_tag"].is_formatted("[ANSWER] 12 and then more text\nmore", strict=False)
    assert not FORMATS["answer_tag"].is_formatted("[ANSWER] 1\n[ANSWER] 2", strict=True)
    assert FORMATS["think"].is_formatted("<think>a</think>\n<answer>4</answer>", strict=True)
    assert not FORMATS["think"].is_formatted("hi <think>a</think><answer>4</answer> bye", strict=True)
    assert FORMATS["think"].is_formatted("hi <think>a</think><answer>4</answer> bye", strict=False)
    assert FORMATS["plain"].is_formatted("The answer is 4") and not FORMATS["plain"].is_formatted("4")


def test_correct_and_format_is_the_gsm8k_combination():
    (fn,), _ = rewards_for({"combined": {"fn": "correct_and_format", "format_weight": 0.1}})
    got = call(fn, ["work\n[ANSWER] 28", "the answer is 28", "[ANSWER] 5", "junk"], ["28"] * 4)
    assert got == pytest.approx([1.0, 0.9, 0.0, -0.1])


def test_names_and_weights_follow_yaml_order():
    funcs, weights = rewards_for(
        {
            "accuracy": {"weight": 1.0},
            "format": {"weight": 0.2, "mode": "soft"},
            "strict_fmt": {"fn": "format", "weight": 0.1},
        }
    )
    assert [f.__name__ for f in funcs] == ["accuracy", "format", "strict_fmt"]
    assert weights == [1.0, 0.2, 0.1]


def test_dotted_path_reward():
    (fn,), weights = rewards_for({"mine": {"fn": "tests.test_rewards.length_reward", "weight": 0.5}})
    assert fn.__name__ == "mine" and weights == [0.5]
    assert call(fn, ["ab", "abcd"], ["1", "1"]) == [2.0, 4.0]


def length_reward(prompts, completions, **kwargs):
    return [float(len(c[0]["content"])) for c in completions]


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"acuracy": {}}, "unknown reward 'acuracy'. Did you mean: accuracy"),
        ({"accuracy": {"mode": "fuzzy"}}, r"accuracy.mode='fuzzy'; accepted: binary, graded, signed"),
        ({"format": {"strictness": 1}}, "unknown option 'strictness'"),
        ({"x": {"fn": "no.such.module.fn"}}, "could not be imported"),
        ({"accuracy": {"weight": "high"}}, "weight must be a number"),
        ({}, "empty"),
    ],
)
def test_bad_reward_config(spec, message):
    with pytest.raises(ConfigError, match=message):
        rewards_for(spec)


@pytest.mark.parametrize("weight", [True, False])
def test_a_bool_weight_is_refused_as_the_config_check_does(weight):
    # `dataset.rewards.accuracy.weight=true` is a typo, not a weight of 1.0
    ctx = RewardContext(scorer=TS.score, prompt_format="answer_tag")
    with pytest.raises(ConfigError) as err:
        build_rewards({"accuracy": {"weight": weight}}, ctx)
    assert str(err.value) == (
        "dataset.rewards.accuracy.weight must be a number: an int or a float (not a bool, NaN or inf), "
        f"got {weight!r}"
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=4))
def test_rewards_never_raise_on_odd_completions(texts):
    funcs, _ = rewards_for({"accuracy": {"mode": "graded"}, "format": {}, "c": {"fn": "correct_and_format"}})
    for fn in funcs:
        out = call(fn, texts, ["28"] * len(texts))
        assert len(out) == len(texts) and all(isinstance(x, float) for x in out)
