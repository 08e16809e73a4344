"""How a rollout used its tools, read from its messages alone, so that training's rollouts (TRL's
completions: assistant turns, each tool result as a `tool` message) and the fixed eval's are counted by one
rule. A call counts when its result reached the model (a `tool` message): calls cut by the iteration cap or
by the completion's length limit never ran, or were rolled back, as TRL rolls them back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from tools import ERROR_PREFIX

# TRL's own reply when a tool raised or was not found: str({"error": ...})
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


def usage_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The fixed eval's tool metrics over records with `tool_calls`, `tool_errors` and `correct`: calls per
    problem, the share of problems that used a tool, errors per problem and per call, and accuracy with and
    without a tool call (left out where no problem is in that group)."""
    n = max(len(rows), 1)
    used = [r for r in rows if r["tool_calls"]]
    unused = [r for r in rows if not r["tool_calls"]]
    calls, errors = sum(r["tool_calls"] for r in rows), sum(r["tool_errors"] for r in rows)
    out = {
        "tools/calls_per_problem": calls / n,
        "tools/used": len(used) / n,
        "tools/errors_per_problem": errors / n,
        "tools/error_rate": errors / calls if calls else 0.0,
    }
    for name, group in (("with_tool", used), ("without_tool", unused)):
        if group:
            out[f"tools/accuracy_{name}"] = sum(bool(r["correct"]) for r in group) / len(group)
    return out
