"""Fuzzing: whatever a model writes, extraction, format checks and every registered reward score it.

Arbitrary unicode (control characters included; hypothesis leaves out lone surrogates, which a
tokenizer's decode never produces), tag soup built from the markers the parsers look for, huge
repeated strings, and every completion shape TRL or a user may pass (plain string, chat messages,
None, non-string content). Nothing may raise, each reward returns one finite float (or None) per
completion, and adversarial inputs stay fast (a regex with nested quantifiers can take hours).
"""

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_common.formats import FORMATS
from grpo_recipes.train.data import to_row
from rewards import REWARDS, RewardContext, build_rewards
from tasks import TaskSet

TS = TaskSet({"basic_arithmetic": {}})
ROWS = [to_row(e, None) for e in TS.sample(4, seed=0)]
COLUMNS = ("question", "answer", "metadata", "task")
MAX_COMPLETION_LENGTH = 64

# code_tests runs the completion's code in a sandboxed subprocess: its own tests (test_sandbox.py
# and the code reward's tests) cover odd programs; fuzzing it here would spawn hundreds of processes.
FUZZED = sorted(name for name in REWARDS if name != "code_tests")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _built():
    """Every reward with its default options, for every prompt format."""
    out = {}
    for fmt in FORMATS:
        ctx = RewardContext(scorer=TS.score, prompt_format=fmt, max_completion_length=MAX_COMPLETION_LENGTH)
        funcs, _ = build_rewards({name: {} for name in FUZZED}, ctx)
        out.update({(fmt, f.__name__): f for f in funcs})
    return out


BUILT = _built()

TOKENS = [
    "[ANSWER]",
    "[answer]:",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<ANSWER>",
    "</",
    "<",
    ">",
    "```",
    "```python\n",
    "\\boxed{",
    "}",
    "the answer is",
    "Answer is:",
    "=",
    "$",
    "-",
    "+",
    ".",
    ",",
    ", ",
    ";",
    "0",
    "1",
    "7",
    "42",
    "1,000",
    "3.50",
    " ",
    "  ",
    "\n",
    "\r\n",
    "\t",
    "\x00",
    "\x1b",
    "**",
    "x",
    "Yes",
    "é",
    "日本",
    "\u202e",
    "\ufeff",
    "🙂",
]
tag_soup = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
# Huge: a short piece repeated up to 100,000 characters (rewards and regexes must stay linear).
huge = st.builds(
    lambda piece, k: (piece * k)[:100_000],
    st.one_of(tag_soup, st.text(min_size=1, max_size=20)),
    st.integers(min_value=50, max_value=20_000),
)
texts = st.one_of(st.text(), st.text(st.characters(codec="utf-8"), max_size=500), tag_soup, huge)


def _shape(text, form):
    """The completion as TRL (plain or chat) or a careless caller would pass it."""
    return {
        "str": text,
        "chat": [{"role": "assistant", "content": text}],
        "chat_bytes_content": [{"role": "assistant", "content": text.encode("utf-8", "replace")}],
        "chat_none_content": [{"role": "assistant", "content": None}],
        "chat_no_content": [{"role": "assistant"}],
        "empty_list": [],
        "none": None,
    }[form]


forms = st.sampled_from(
    [
        "str",
        "str",
        "chat",
        "chat",
        "chat_bytes_content",
        "chat_none_content",
        "chat_no_content",
        "empty_list",
        "none",
    ]
)
batches = st.lists(st.tuples(texts, forms), min_size=1, max_size=4)
ids_modes = st.sampled_from(["ids", "none", "missing", "wrong_length"])


@SETTINGS
@given(texts)
def test_extract_answer_never_raises(text):
    got = FORMATS["plain"].extract(text)
    assert got.rule in FORMATS["plain"].rules
    assert (got.answer is None) == (got.rule == "none")
    assert got.answer is None or (isinstance(got.answer, str) and got.answer)


@SETTINGS
@given(texts)
def test_format_ok_never_raises(text):
    for fmt in FORMATS:
        for strict in (True, False):
            assert isinstance(FORMATS[fmt].is_formatted(text, strict), bool)


@SETTINGS
@given(batches, ids_modes, st.randoms(use_true_random=False))
def test_every_reward_scores_every_completion(batch, ids_mode, rnd):
    n = len(batch)
    completions = [_shape(text, form) for text, form in batch]
    rows = [ROWS[i % len(ROWS)] for i in range(n)]
    kwargs = {c: [r[c] for r in rows] for c in COLUMNS}
    kwargs.update(
        trainer_state=None, log_metric=lambda name, value: None, log_extra=lambda name, values: None
    )
    if ids_mode == "ids":
        kwargs["completion_ids"] = [
            [rnd.randrange(50_000) for _ in range(rnd.randrange(150))] for _ in range(n)
        ]
    elif ids_mode == "none":
        kwargs["completion_ids"] = None
    elif ids_mode == "wrong_length":
        kwargs["completion_ids"] = [[1, 2, 3]] * (n + 1)
    prompts = [[{"role": "user", "content": r["question"]}] for r in rows]
    for (fmt, name), fn in BUILT.items():
        out = fn(prompts=prompts, completions=completions, **kwargs)
        assert isinstance(out, list) and len(out) == n, (fmt, name)
        for x in out:
            assert x is None or (isinstance(x, float) and math.isfinite(x)), (fmt, name, x)


def test_every_reward_but_code_is_fuzzed():
    assert {"accuracy", "format", "tag_count", "soft_overlong", "length_scaled", "repetition"} <= set(FUZZED)


# Inputs that made the format regexes backtrack for seconds to hours (cubic: `.*?\S.*?</answer>` after
# each `<answer>`; quadratic: `[^\n]*\s*\Z` over a line of spaces). Linear now: milliseconds.
ADVERSARIAL = [
    ("<think></think><answer>" + "x ") * 800,
    "<think></think><answer>" + "x" * 19_000,
    "<think>" + ("</think><answer>" + "x" * 200) * 90,
    "<think></think><answer>" + "< " * 9_500,
    "[ANSWER] x" + " " * 19_000 + "\ny",
    "[ANSWER]\n" + "x " * 9_000 + "[ANSWER] y",
    "<answer>" * 2_500,
    "answer is " * 2_000,
    "= 1" * 6_000,
    "```" * 6_000,
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=[f"adversarial{i}" for i in range(len(ADVERSARIAL))])
def test_adversarial_texts_stay_fast(text):
    start = time.thread_time()  # CPU time: a loaded machine cannot fail it, a backtracking regex does
    FORMATS["plain"].extract(text)
    for fmt in FORMATS:
        for strict in (True, False):
            FORMATS[fmt].is_formatted(text, strict)
    assert time.thread_time() - start < 2.0


@SETTINGS
@given(texts)
def test_extract_code_and_test_suite_parsing_never_raise(text):
    from rewards.code import TestSuite

    extraction = FORMATS["code"].extract(text)
    assert extraction.rule in FORMATS["code"].rules and (
        extraction.answer is None or isinstance(extraction.answer, str)
    )
    for metadata in (text, {"tests": text}, {"tests": [[text, True]], "entry_point": text}):
        suite = TestSuite.from_metadata(metadata)  # malformed metadata is None, never an error
        assert suite is None or isinstance(suite, TestSuite)
