"""What every reward needs: the text of a completion and the task entry it answers."""

from __future__ import annotations

import math
from typing import Any

from grpo_common.formats import PromptFormat


def completion_text(completion: Any) -> str:
    """TRL passes a list of messages for chat prompts and a plain string otherwise."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else str(content)
    return "" if completion is None else str(completion)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def judge_with(scorer, answer_format: PromptFormat, code_format: PromptFormat | None = None, is_code=None):
    """A batch judge `(texts, entries) -> [(Extraction, score)]` from a per-answer scorer, reading
    answers with `answer_format`, and rows `is_code(row)` says hold a program with `code_format`
    (TaskSet.judge is the full one: batch scoring, one verification per completion)."""

    def judge(texts, rows):
        out = []
        for text, row in zip(texts, rows):
            code = code_format is not None and is_code is not None and is_code(row)
            extraction = (code_format if code else answer_format).extract(text)
            out.append((extraction, scorer(extraction.answer, row)))
        return out

    return judge


def entries(kwargs: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Rebuild each completion's task entry from the dataset columns TRL hands to rewards."""
    columns = ("question", "answer", "metadata", "task")
    return [{c: kwargs[c][i] for c in columns if c in kwargs} for i in range(n)]
