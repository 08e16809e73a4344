"""The fixed eval's tool metrics, over records counted by the one rule training and the tool rewards use
(grpo_common/tool_use.py, re-exported here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpo_common.tool_use import ToolUse, is_tool_error, tool_use

__all__ = ["ToolUse", "is_tool_error", "tool_use", "usage_metrics"]


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
