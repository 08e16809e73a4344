"""How a rollout used its tools, read from its messages alone: one rule for training's rollouts, the tool
reward terms (rewards/) and the fixed eval (grpo_recipes/evaluation/metrics.py). A call counts when its result
reached the model (a `tool` message): calls cut by the iteration cap or the length limit never ran, or were
rolled back, as TRL rolls them back. A tool failure comes back as a string starting with `error: `
(ERROR_PREFIX); TRL's own reply for a tool that raised or was not found is str({"error": ...})."""

from collections.abc import Sequence
from typing import Any, NamedTuple

ERROR_PREFIX = "error: "
_TRL_ERROR = ("{'error': ", '{"error": ')


class ToolUse(NamedTuple):
    calls: int  # tool results the model read
    errors: int  # of them, failures


def is_tool_error(content: Any) -> bool:
    return str(content).startswith((ERROR_PREFIX, *_TRL_ERROR))


def tool_use(messages: Sequence[dict[str, Any]] | str | None) -> ToolUse:
    """The tool calls and tool errors of one rollout (a plain-text completion has none)."""
    if not isinstance(messages, (list, tuple)):
        return ToolUse(0, 0)
    results = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    return ToolUse(len(results), sum(is_tool_error(c) for c in results))
