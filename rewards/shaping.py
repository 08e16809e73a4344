"""Shaping rewards: tag counting, length shaping (DAPO, Kimi 1.5) and an n-gram repetition penalty.

- tag_count:     partial credit for the prompt format's tags (open-r1's tag_count_reward): the share of
                 its `tags` that appear exactly once (think: 0.25 for each of <think>, </think>, <answer>,
                 </answer>; answer_tag: 1.0 for one [ANSWER], in any case); 0 for a format without tags.
- soft_overlong: DAPO's soft overlong punishment (Eq. 13), with L = completion length in tokens:
                 0 if L <= L_max - L_cache; ((L_max - L_cache) - L) / L_cache if L <= L_max; -1 above L_max.
- length_scaled: Kimi 1.5's length reward (open-r1's len_reward):
                 lambda = 0.5 - (L - min_L) / (max_L - min_L) over the batch (or each prompt's group),
                 0 for all when the lengths are equal; correct -> lambda, wrong -> min(0, lambda).
- repetition:    open-r1's n-gram repetition penalty on lowercased whitespace tokens:
                 (1 - unique_ngrams / total_ngrams) * max_penalty; 0 for texts shorter than n words.

Lengths are token counts from TRL's `completion_ids`. Without them (a reward called outside the
trainer) soft_overlong estimates ceil(characters / 4) tokens and length_scaled uses characters
(its ratio does not depend on the unit). Every reward returns one finite float per completion and
never raises on odd completions (empty, None, huge, non-str content).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import groupby
from typing import Any

from grpo_common.errors import ConfigError
from grpo_common.formats import get_format
from rewards.common import completion_text, entries, is_int, is_number


def _lengths(completions: list, completion_ids: Any, estimate: Callable[[str], float]) -> list[float]:
    """Token count per completion from TRL's `completion_ids`; `estimate(text)` where those are missing."""
    rows = [None] * len(completions)
    if isinstance(completion_ids, (list, tuple)) and len(completion_ids) == len(completions):
        rows = completion_ids
    out = []
    for completion, row in zip(completions, rows):
        try:
            out.append(float(len(row)))
        except TypeError:  # None or not a sequence
            out.append(float(estimate(completion_text(completion))))
    return out


def make_tag_count_reward(prompt_format: str) -> Callable:
    fmt = get_format(prompt_format)

    def share(text: str) -> float:
        return sum(fmt.count(text, tag) == 1 for tag in fmt.tags) / len(fmt.tags) if fmt.tags else 0.0

    def reward(prompts, completions, **kwargs):
        return [share(completion_text(c)) for c in completions]

    return reward


def make_soft_overlong_reward(
    max_length: int | None, cache: int | None = None, max_completion_length: int | None = None
) -> Callable:
    """L_max = `max_length` (None: grpo.max_completion_length, passed in as `max_completion_length`);
    L_cache = `cache` (None: a fifth of L_max, DAPO's ratio of 4096 to 20480). TRL truncates completions
    at max_completion_length, so with the default L_max a truncated completion scores -1."""
    name = "dataset.rewards.soft_overlong"
    if max_length is None:
        max_length = max_completion_length
        if max_length is None:
            raise ConfigError(
                f"{name}.max_length: not set and grpo.max_completion_length is unknown; "
                "set max_length (in tokens)"
            )
    if not is_int(max_length) or max_length < 1:
        raise ConfigError(f"{name}.max_length must be a positive integer (tokens), got {max_length!r}")
    if cache is None:
        cache = max_length // 5
    if not is_int(cache) or not 0 <= cache <= max_length:
        raise ConfigError(
            f"{name}.cache must be an integer between 0 and max_length={max_length}, got {cache!r}"
        )
    threshold = max_length - cache

    def reward(prompts, completions, completion_ids=None, **kwargs):
        out = []
        for length in _lengths(completions, completion_ids, lambda t: math.ceil(len(t) / 4)):
            if length <= threshold:
                out.append(0.0)
            elif length <= max_length:
                out.append((threshold - length) / cache)
            else:
                out.append(-1.0)
        return out

    return reward


def make_length_scaled_reward(judge, scope: str = "batch") -> Callable:
    """scope: batch (open-r1: min/max over all completions passed) | group (Kimi 1.5: over each prompt's
    completions, a group being a run of consecutive completions of the same question)."""

    def reward(prompts, completions, completion_ids=None, **kwargs):
        n = len(completions)
        lengths = _lengths(completions, completion_ids, len)
        correct = [
            score >= 1.0 for _, score in judge([completion_text(c) for c in completions], entries(kwargs, n))
        ]
        if scope == "group" and "question" in kwargs:
            questions = kwargs["question"]
            groups = [list(run) for _, run in groupby(range(n), key=lambda i: questions[i])]
        else:
            groups = [list(range(n))]
        out = [0.0] * n
        for group in groups:
            lo, hi = min(lengths[i] for i in group), max(lengths[i] for i in group)
            if hi == lo:
                continue
            for i in group:
                lam = 0.5 - (lengths[i] - lo) / (hi - lo)
                out[i] = lam if correct[i] else min(0.0, lam)
        return out

    return reward


def make_repetition_reward(ngram_size: int = 3, max_penalty: float = -1.0) -> Callable:
    name = "dataset.rewards.repetition"
    if not is_int(ngram_size) or ngram_size < 1:
        raise ConfigError(f"{name}.ngram_size must be a positive integer, got {ngram_size!r}")
    if not is_number(max_penalty):
        raise ConfigError(f"{name}.max_penalty must be a finite number, got {max_penalty!r}")
    if max_penalty > 0:
        raise ConfigError(f"{name}.max_penalty must be <= 0 (it is a penalty), got {max_penalty!r}")

    def penalty(text: str) -> float:
        words = text.lower().split()
        if len(words) < ngram_size:
            return 0.0
        ngrams = list(zip(*[words[i:] for i in range(ngram_size)]))
        return (1.0 - len(set(ngrams)) / len(ngrams)) * float(max_penalty)

    def reward(prompts, completions, **kwargs):
        return [penalty(completion_text(c)) for c in completions]

    return reward
