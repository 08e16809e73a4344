"""Format compliance: does the completion present its answer the way the prompt format asks?

strict: the whole completion has the format's shape (answer tag alone on the last line;
        <think>..</think><answer>..</answer> and nothing else).
soft:   the format's answer marker appears somewhere.
For the `plain` format any explicit answer (tag or "the answer is"/"= x") complies.
"""
from __future__ import annotations

import re

from rewards.common import completion_text
from rewards.extraction import extract_answer

_TAG_SOFT = re.compile(r"\[ANSWER\][:\s]*\S", re.IGNORECASE)
_TAG_STRICT = re.compile(r"(?:\A|\n)[ \t]*\[ANSWER\][: \t]*\S[^\n]*\s*\Z", re.IGNORECASE)
_THINK_SOFT = re.compile(r"<think>.*?</think>\s*<answer>.*?\S.*?</answer>", re.DOTALL)
_THINK_STRICT = re.compile(r"\A\s*<think>(?:(?!<think>).)*?</think>\s*<answer>[^<]*?\S[^<]*</answer>\s*\Z", re.DOTALL)


def format_ok(text: str, prompt_format: str, strict: bool = True) -> bool:
    text = text[:20_000]
    if prompt_format == "answer_tag":
        if strict:
            return bool(_TAG_STRICT.search(text)) and len(_TAG_SOFT.findall(text)) == 1
        return bool(_TAG_SOFT.search(text))
    if prompt_format == "think":
        return bool((_THINK_STRICT if strict else _THINK_SOFT).search(text))
    return extract_answer(text).rule in ("tag", "phrase")


def make_format_reward(prompt_format: str, mode: str = "strict"):
    """1.0 when the completion follows `prompt_format` (`mode`: strict | soft), else 0.0."""
    strict = mode == "strict"

    def reward(prompts, completions, **kwargs):
        return [float(format_ok(completion_text(c), prompt_format, strict)) for c in completions]

    return reward
