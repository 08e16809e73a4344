"""report.md's tool section, when the fixed eval used tools or an environment: the last eval's tool metrics,
and one of its rollouts turn by turn (one that called a tool, if any did), from the eval JSON's `turns`."""

from __future__ import annotations

import json
from typing import Any

from grpo_recipes.evaluation.metrics import fixed_examples

METRICS = {
    "tools/calls_per_problem": ("tool calls per problem", "{:.2f}"),
    "tools/used": ("problems that used a tool", "{:.0%}"),
    "tools/error_rate": ("tool errors per call", "{:.0%}"),
    "tools/accuracy_with_tool": ("accuracy with a tool call", "{:.1%}"),
    "tools/accuracy_without_tool": ("accuracy without one", "{:.1%}"),
    "env/reward": ("the environment's reward", "{:.3f}"),
}


def _clean(text: Any, n: int) -> str:
    text = str(text if text is not None else "")
    return (text[:n] + " ..." if len(text) > n else text).replace("\n", " ").replace("|", "\\|")


def _call(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    args = function.get("arguments") or {}
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items()) if isinstance(args, dict) else args
    return f"`{_clean(function.get('name'), 40)}({_clean(shown, 300)})`"


def turn_lines(turns: list[dict[str, Any]]) -> list[str]:
    out = []
    for k, turn in enumerate(turns, 1):
        role = turn.get("role", "?")
        who = f"tool ({turn['name']})" if role == "tool" and turn.get("name") else role
        line = f'{k}. {who}: "{_clean(turn.get("content"), 400)}"'
        calls = turn.get("tool_calls") or []
        if calls:
            line += " -> calls " + ", ".join(_call(c) for c in calls)
        out.append(line)
    return out


def tool_section(evals: dict[int, dict]) -> list[str]:
    last = max(evals)
    examples = [e for e in fixed_examples(evals[last]["examples"]) if "turns" in e]
    if not examples:
        return []
    metrics = evals[last]["metrics"]
    shown = [f"{name} {fmt.format(metrics[key])}" for key, (name, fmt) in METRICS.items() if key in metrics]
    example = next((e for e in examples if e.get("tool_calls")), examples[0])
    mark = "correct" if example["correct"] else "wrong"
    calls, errors = example.get("tool_calls", 0), example.get("tool_errors", 0)
    out = ["## Tool use", "", f"At step {last}: {', '.join(shown)}.", ""]
    intro = (
        f"One rollout of the step-{last} eval, turn by turn: **{example['task']}**: "
        f"{_clean(example['question'], 300)} (answer `{_clean(example['answer'], 60)}`); {mark}, "
        f"{calls} tool call(s), {errors} error(s)."
    )
    out += [intro, ""]
    return out + turn_lines(example["turns"]) + [""]
