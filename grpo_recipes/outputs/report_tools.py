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


def clean(text: Any, n: int) -> str:
    """`text` on one line of a markdown table, cut at `n` characters."""
    text = str(text)
    return (text[:n] + " ..." if len(text) > n else text).replace("\n", " ").replace("|", "\\|")


def _call(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    args = function.get("arguments") or {}
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items()) if isinstance(args, dict) else args
    return f"`{clean(function.get('name') or '', 40)}({clean(shown, 300)})`"


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
    intro = (
        f"One rollout of the step-{last} eval, turn by turn: **{example['task']}**: "
        f"{clean(example['question'], 300)} (answer `{clean(example['answer'], 60)}`); {mark}, "
        f"{calls} tool call(s), {errors} error(s)."
    )
    out = ["## Tool use", "", f"At step {last}: {', '.join(shown)}.", "", intro, ""]
    for k, turn in enumerate(example["turns"], 1):
        role = turn.get("role", "?")
        who = f"tool ({turn['name']})" if role == "tool" and turn.get("name") else role
        calls = ", ".join(_call(c) for c in turn.get("tool_calls") or [])
        out.append(
            f'{k}. {who}: "{clean(turn.get("content") or "", 400)}"' + (f" -> calls {calls}" if calls else "")
        )
    return out + [""]
