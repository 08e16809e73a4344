"""How a rollout used its tools, read from its messages alone: one rule for training's rollouts (TRL's
completions: assistant turns, each tool result as a `tool` message), the tool reward terms (rewards/) and
the fixed eval (tools/usage.py). It lives at the bottom layer so that rewards, below tools, count as they do.
A call counts when its result reached the model (a `tool` message): calls cut by the iteration cap or by the
completion's length limit never ran, or were rolled back, as TRL rolls them back. A tool never raises: a
failure comes back as a string starting with `error: ` (ERROR_PREFIX); TRL's own reply for a tool that
raised or was not found is str({"error": ...})."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

ERROR_PREFIX = "error: "
_TRL_ERROR = ("{'error': ", '{"error": ')


class ToolUse(NamedTuple):
    calls: int  # tool results the model read
    errors: int  # of them, failures


def is_tool_error(content: Any) -> bool:
    text = content if isinstance(content, str) else str(content)
    return text.startswith(ERROR_PREFIX) or text.startswith(_TRL_ERROR)


def tool_use(messages: Sequence[dict[str, Any]] | str | None) -> ToolUse:
    """The tool calls and tool errors of one rollout (a plain-text completion has none)."""
    if not isinstance(messages, (list, tuple)):
        return ToolUse(0, 0)
    results = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    return ToolUse(len(results), sum(is_tool_error(c) for c in results))
