"""Format compliance: does the completion present its answer the way the prompt format asks?

strict: the whole completion has the format's shape (answer tag alone on the last line, or a
        bare tag line with a multi-line answer below it, ending the completion;
        <think>..</think><answer>..</answer> and nothing else).
soft:   the format's answer marker appears somewhere.
For the `plain` format any explicit answer (tag or "the answer is"/"= x") complies.
"""
from __future__ import annotations

import re

from rewards.common import completion_text
from rewards.extraction import extract_answer

_TAG_SOFT = re.compile(r"\[ANSWER\][:\s]*\S", re.IGNORECASE)
# Every pattern here runs in linear time: nested lazy/greedy quantifiers that can retry the same text
# (`.*?\S.*?`, `[^\n]*\s*`) made a 2,500-character completion take 19 s, and 20,000 characters hours.
# The answer on the tag's line, or (multi-line answers: grids, boards) the block below a bare tag line.
_TAG_STRICT = re.compile(r"(?:\A|\n)[ \t]*\[ANSWER\][: \t]*(?:\S[^\n]*(?:\n\s*)?|\r?\n\s*\S.*)\Z",
                         re.IGNORECASE | re.DOTALL)
# Soft think: after the first <think>, the first `</think> <answer>`, then some text and a </answer>.
_THINK_THEN_ANSWER = re.compile(r"</think>\s*<answer>")
_ANSWER_REST = re.compile(r"\s*\S.*?</answer>", re.DOTALL)
# The answer may hold code (`a < b`), but no other think/answer tag.
_TAGS = r"</?answer>|</?think>"
_ANSWER_BODY = r"(?:(?!" + _TAGS + r").)"
# Some non-space text, of which at most one character may start a tag (as `body*? \S body*` allows).
_THINK_STRICT = re.compile(
    r"\A\s*<think>(?:(?!<think>).)*?</think>\s*<answer>"
    r"(?:\s*(?!" + _TAGS + r")\S" + _ANSWER_BODY + r"*|" + _ANSWER_BODY + r"*(?=" + _TAGS + r")<" + _ANSWER_BODY + r"*)"
    r"</answer>\s*\Z",
    re.DOTALL)
_FENCE = re.compile(r"```[\w+#-]*[^\n]*\n.*?```", re.DOTALL)


def format_ok(text: str, prompt_format: str, strict: bool = True) -> bool:
    text = text[:20_000]
    if prompt_format == "answer_tag":
        if strict:
            return bool(_TAG_STRICT.search(text)) and len(_TAG_SOFT.findall(text)) == 1
        return bool(_TAG_SOFT.search(text))
    if prompt_format == "code":  # strict: exactly one fenced block; soft: at least one
        blocks = len(_FENCE.findall(text))
        return blocks == 1 if strict else blocks >= 1
    if prompt_format == "think":
        if strict:
            return bool(_THINK_STRICT.search(text))
        start = text.find("<think>")
        close = _THINK_THEN_ANSWER.search(text, start + len("<think>")) if start >= 0 else None
        return bool(close and _ANSWER_REST.match(text, close.end()))
    return extract_answer(text).rule in ("tag", "phrase")


def make_format_reward(prompt_format: str, mode: str = "strict"):
    """1.0 when the completion follows `prompt_format` (`mode`: strict | soft), else 0.0."""
    strict = mode == "strict"

    def reward(prompts, completions, **kwargs):
        return [float(format_ok(completion_text(c), prompt_format, strict)) for c in completions]

    return reward
