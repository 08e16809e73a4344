"""What every reward needs: the text of a completion and the task entry it answers."""

from __future__ import annotations

import math
from typing import Any


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


def entries(kwargs: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Rebuild each completion's task entry from the dataset columns TRL hands to rewards."""
    return [
        {c: kwargs[c][i] for c in ("question", "answer", "metadata", "task") if c in kwargs} for i in range(n)
    ]
