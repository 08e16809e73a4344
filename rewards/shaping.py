"""Shaping rewards (README: Rewards), one finite float per completion. Lengths are token counts from TRL's
`completion_ids`; without them (a reward called outside the trainer) soft_overlong estimates
ceil(characters / 4) tokens and length_scaled uses characters (its ratio does not depend on the unit)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from grpo_common.errors import ConfigError, is_int, is_number
from grpo_common.formats import get_format
from rewards.accuracy import prompt_groups
from rewards.registry import completion_text, entries


def _lengths(completions: list, completion_ids: Any, estimate: Callable[[str], float]) -> list[float]:
    if isinstance(completion_ids, (list, tuple)) and len(completion_ids) == len(completions):
        return [float(len(ids)) for ids in completion_ids]
    return [float(estimate(completion_text(c))) for c in completions]


def tag_count(ctx) -> Callable:
    """open-r1's tag_count_reward: the share of the format's `tags` that appear exactly once (think: 0.25
    for each of <think>, </think>, <answer>, </answer>; answer_tag: 1.0 for one [ANSWER], in any case)."""
    fmt = get_format(ctx.prompt_format)

    def share(text: str) -> float:
        return sum(fmt.count(text, tag) == 1 for tag in fmt.tags) / len(fmt.tags) if fmt.tags else 0.0

    def reward(prompts, completions, **kwargs):
        return [share(completion_text(c)) for c in completions]

    return reward


def soft_overlong(ctx, max_length=None, cache=None) -> Callable:
    """DAPO's soft overlong punishment (Eq. 13): 0 if L <= L_max - L_cache; ((L_max - L_cache) - L) / L_cache
    if L <= L_max; -1 above. L_max = `max_length` (None: grpo.max_completion_length; TRL truncates there, so
    a truncated completion scores -1); L_cache = `cache` (None: a fifth of L_max, DAPO's 4096 / 20480)."""
    name = "dataset.rewards.soft_overlong"
    max_length = ctx.max_completion_length if max_length is None else max_length
    if max_length is None:
        raise ConfigError(
            f"{name}.max_length: not set and grpo.max_completion_length is unknown; "
            "set max_length (in tokens)"
        )
    if not is_int(max_length) or max_length < 1:
        raise ConfigError(f"{name}.max_length must be a positive integer (tokens), got {max_length!r}")
    cache = max_length // 5 if cache is None else cache
    if not is_int(cache) or not 0 <= cache <= max_length:
        raise ConfigError(
            f"{name}.cache must be an integer between 0 and max_length={max_length}, got {cache!r}"
        )
    threshold = max_length - cache

    def reward(prompts, completions, completion_ids=None, **kwargs):
        lengths = _lengths(completions, completion_ids, lambda t: math.ceil(len(t) / 4))
        return [
            0.0 if n <= threshold else (-1.0 if n > max_length else (threshold - n) / cache) for n in lengths
        ]

    return reward


def length_scaled(ctx, scope="batch") -> Callable:
    """Kimi 1.5's length reward: lambda = 0.5 - (L - min_L) / (max_L - min_L), 0 when the lengths are equal;
    correct -> lambda, wrong -> min(0, lambda). min and max over the batch (open-r1) or, scope=group, each
    prompt's completions (Kimi 1.5: a run of consecutive completions of the same question)."""

    def reward(prompts, completions, completion_ids=None, **kwargs):
        n = len(completions)
        lengths = _lengths(completions, completion_ids, len)
        judged = ctx.judge([completion_text(c) for c in completions], entries(kwargs, n))
        correct = [score >= 1.0 for _, score in judged]
        groups = (
            prompt_groups(kwargs["question"]) if scope == "group" and "question" in kwargs else [range(n)]
        )
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


def repetition(ctx, ngram_size=3, max_penalty=-1.0) -> Callable:
    """open-r1's n-gram penalty on lowercased words: (1 - unique n-grams / n-grams) x max_penalty."""
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
