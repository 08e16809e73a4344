"""Shaping rewards (rewards/shaping.py): exact values on hand-built batches, and their YAML options."""

import json

import pytest

from grpo_common.errors import ConfigError
from rewards import REWARDS, RewardContext, build_rewards
from tasks import TaskSet

TS = TaskSet({"sum_digits": {}})
META = json.dumps({"source_dataset": "sum_digits"})


def build(spec, prompt_format="answer_tag", max_completion_length=None):
    ctx = RewardContext(
        scorer=TS.score, prompt_format=prompt_format, max_completion_length=max_completion_length
    )
    return build_rewards(spec, ctx)


def one(spec, **ctx):
    (fn,), _ = build(spec, **ctx)
    return fn


def call(fn, texts, ids=None, answers=None, questions=None, chat=True):
    """The way GRPOTrainer calls a reward: chat completions are lists of messages."""
    n = len(texts)
    completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else list(texts)
    kwargs = {
        "answer": answers or ["28"] * n,
        "metadata": [META] * n,
        "question": questions or ["q"] * n,
        "task": ["sum_digits"] * n,
        "trainer_state": None,
    }
    return fn(prompts=[[]] * n, completions=completions, completion_ids=ids, **kwargs)


def test_new_rewards_are_registered():
    assert {"tag_count", "soft_overlong", "length_scaled", "repetition"} <= set(REWARDS)


# --- tag_count ---


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<think>a</think><answer>4</answer>", 1.0),
        ("<think>\na\n</think>\n<answer>\n4\n</answer>", 1.0),
        ("<think>a</think>", 0.5),
        ("<think><think>a</think><answer>4</answer>", 0.75),  # <think> twice: no credit for it
        ("<answer>4</answer><answer>5</answer>", 0.0),
        ("<THINK>a</THINK>", 0.0),  # tags are case-sensitive, as in the format check
        ("", 0.0),
    ],
)
def test_tag_count_think(text, expected):
    assert call(one({"tag_count": {}}, prompt_format="think"), [text]) == [expected]


def test_tag_count_answer_tag_and_plain():
    texts = ["work\n[ANSWER] 4", "[answer]: 4", "[ANSWER] 1\n[ANSWER] 2", "no tag", ""]
    assert call(one({"tag_count": {}}, prompt_format="answer_tag"), texts) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert call(one({"tag_count": {}}, prompt_format="plain"), texts) == [0.0] * 5


def test_tag_count_plain_string_completions():
    fn = one({"tag_count": {}}, prompt_format="think")
    assert call(fn, ["<think>a</think>", "<answer>4</answer>"], chat=False) == [0.5, 0.5]


# --- soft_overlong ---


def test_soft_overlong_from_completion_ids():
    # L_max = 10, L_cache = 4: free up to 6 tokens, then -0.25 per token, -1 beyond 10.
    fn = one({"soft_overlong": {"max_length": 10, "cache": 4}})
    lengths = [0, 6, 7, 8, 9, 10, 11, 500]
    ids = [[1] * n for n in lengths]
    texts = ["x"] * len(lengths)  # the text is ignored when token ids are given
    assert call(fn, texts, ids=ids) == [0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]


def test_soft_overlong_defaults_to_grpo_max_completion_length():
    # max_length from grpo.max_completion_length = 20; cache = 20 // 5 = 4: free up to 16 tokens.
    fn = one({"soft_overlong": {}}, max_completion_length=20)
    ids = [[7] * n for n in (16, 17, 18, 20, 21)]
    assert call(fn, ["a"] * 5, ids=ids) == [0.0, -0.25, -0.5, -1.0, -1.0]


def test_soft_overlong_without_ids_estimates_four_characters_per_token():
    fn = one({"soft_overlong": {"max_length": 20, "cache": 4}})
    # ceil(64/4) = 16 -> 0; ceil(70/4) = 18 -> -0.5; ceil(81/4) = 21 -> -1
    texts = ["x" * 64, "x" * 70, "x" * 81]
    assert call(fn, texts, ids=None) == [0.0, -0.5, -1.0]
    assert call(fn, texts, ids=None, chat=False) == [0.0, -0.5, -1.0]


def test_soft_overlong_zero_cache_is_a_hard_limit():
    fn = one({"soft_overlong": {"max_length": 5, "cache": 0}})
    assert call(fn, ["a"] * 3, ids=[[1] * 4, [1] * 5, [1] * 6]) == [0.0, 0.0, -1.0]


# --- length_scaled ---


def test_length_scaled_over_the_batch():
    # lengths 10..50: lambda = 0.5 - (len - 10) / 40 = 0.5, 0.25, 0.0, -0.5
    fn = one({"length_scaled": {}})
    texts = ["[ANSWER] 28", "[ANSWER] 5", "[ANSWER] 28", "[ANSWER] 7"]  # correct, wrong, correct, wrong
    ids = [[1] * n for n in (10, 20, 30, 50)]
    assert call(fn, texts, ids=ids) == [0.5, 0.0, 0.0, -0.5]
    # all correct: every completion gets its lambda
    assert call(fn, ["[ANSWER] 28"] * 4, ids=ids) == [0.5, 0.25, 0.0, -0.5]


def test_length_scaled_equal_lengths_score_zero():
    fn = one({"length_scaled": {}})
    assert call(fn, ["[ANSWER] 28", "[ANSWER] 5"], ids=[[1] * 8, [2] * 8]) == [0.0, 0.0]


def test_length_scaled_per_group():
    # Kimi 1.5 scales within each prompt's completions (consecutive runs of the same question).
    fn = one({"length_scaled": {"scope": "group"}})
    ids = [[1] * n for n in (10, 20, 30, 50)]
    got = call(fn, ["[ANSWER] 28"] * 4, ids=ids, questions=["a", "a", "b", "b"])
    assert got == [0.5, -0.5, 0.5, -0.5]


def test_length_scaled_without_ids_uses_characters():
    fn = one({"length_scaled": {}})
    texts = ["[ANSWER] 28", "[ANSWER] 28" + " " * 11, "[ANSWER] 5" + " " * 23]  # 11, 22, 33 characters
    assert call(fn, texts) == [0.5, 0.0, -0.5]


# --- repetition ---


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a b c a b c", -0.25),  # 4 trigrams, 3 distinct
        ("A b C a B c", -0.25),  # lowercased first
        ("x x x x x", -2 / 3),  # 3 trigrams, 1 distinct
        ("one two three four", 0.0),  # no repeats
        ("a b", 0.0),  # shorter than n
        ("", 0.0),
    ],
)
def test_repetition_default_trigrams(text, expected):
    assert call(one({"repetition": {}}), [text]) == [pytest.approx(expected)]


def test_repetition_options():
    fn = one({"repetition": {"ngram_size": 2, "max_penalty": -2.0}})
    assert call(fn, ["a b a b", "a b"]) == [pytest.approx(-2 / 3), 0.0]  # bigrams ab, ba, ab: 1 - 2/3


# --- YAML ---


def test_build_from_yaml_with_weights():
    spec = {
        "tag_count": {"weight": 0.5},
        "overlong": {"fn": "soft_overlong", "weight": 0.3, "max_length": 10, "cache": 4},
        "length_scaled": {},
        "repetition": {"weight": 0.2, "ngram_size": 2, "max_penalty": -0.5},
    }
    funcs, weights = build(spec, prompt_format="think")
    assert [f.__name__ for f in funcs] == ["tag_count", "overlong", "length_scaled", "repetition"]
    assert weights == [0.5, 0.3, 1.0, 0.2]
    texts = ["<think>a</think><answer>28</answer>", "a b a b"]
    ids = [[1] * 8, [1] * 4]
    assert [call(f, texts, ids=ids) for f in funcs] == [
        [1.0, 0.0],
        [-0.5, 0.0],
        [-0.5, 0.0],
        [0.0, pytest.approx(-1 / 6)],
    ]


def test_old_positional_reward_context_still_works():
    ctx = RewardContext(TS.score, "answer_tag")
    assert ctx.max_completion_length is None
    (fn,), _ = build_rewards({"soft_overlong": {"max_length": 8}}, ctx)
    assert call(fn, ["a"], ids=[[1] * 9]) == [-1.0]


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"repetition": {"max_penalty": 0.5}}, r"dataset\.rewards\.repetition\.max_penalty must be <= 0"),
        ({"rep": {"fn": "repetition", "max_penalty": 1}}, r"dataset\.rewards\.rep\.max_penalty must be <= 0"),
        ({"repetition": {"max_penalty": float("nan")}}, r"repetition\.max_penalty must be a finite number"),
        ({"repetition": {"max_penalty": "-1"}}, r"repetition\.max_penalty must be a finite number"),
        (
            {"repetition": {"ngram_size": 0}},
            r"dataset\.rewards\.repetition\.ngram_size must be a positive integer",
        ),
        ({"repetition": {"ngram_size": 2.5}}, r"repetition\.ngram_size must be a positive integer"),
        ({"repetition": {"ngram_size": True}}, r"repetition\.ngram_size must be a positive integer"),
        (
            {"repetition": {"n": 3}},
            r"dataset\.rewards\.repetition: unknown option 'n'.*ngram_size, max_penalty",
        ),
        ({"soft_overlong": {}}, r"dataset\.rewards\.soft_overlong\.max_length: not set"),
        ({"overlong": {"fn": "soft_overlong"}}, r"dataset\.rewards\.overlong\.max_length: not set"),
        ({"soft_overlong": {"max_length": 0}}, r"soft_overlong\.max_length must be a positive integer"),
        ({"soft_overlong": {"max_length": "long"}}, r"soft_overlong\.max_length must be a positive integer"),
        (
            {"soft_overlong": {"max_length": 10, "cache": 11}},
            r"soft_overlong\.cache must be an integer between 0",
        ),
        (
            {"soft_overlong": {"max_length": 10, "cache": -1}},
            r"soft_overlong\.cache must be an integer between 0",
        ),
        (
            {"length_scaled": {"scope": "prompt"}},
            r"dataset\.rewards\.length_scaled\.scope='prompt'; accepted: batch, group",
        ),
        ({"tag_count": {"mode": "strict"}}, r"dataset\.rewards\.tag_count: unknown option 'mode'"),
    ],
)
def test_bad_options_name_the_key(spec, message):
    with pytest.raises(ConfigError, match=message):
        build(spec)
