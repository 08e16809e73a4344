"""The rules that span the tools=, env= and dataset groups, checked before anything loads: every tool name the
model is shown is unique, the iteration cap lets the feedback environment's turns happen, the tool reward
terms and the worked examples' tool calls have tools to count or call. (The chat template's ability to call
tools is checked when the tokenizer loads: grpo_recipes/models/loading.py.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_common.errors import ConfigError
from tools import ENV_TOOLS

TOOL_REWARDS = ("tool_format", "tool_errors")  # rewards/tool_use.py: they read tool turns


def check_tools(cfg: Mapping[str, Any]) -> None:
    from grpo_recipes.train.data import few_shot

    env = cfg["env"]["name"]  # the tools the model is shown: tools.names, then the environment's methods
    names = [*dict.fromkeys(cfg["tools"]["names"]), *(ENV_TOOLS[env] if env else ())]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(
            f"env.name={env}: tools.names gives the model a tool named '{clash[0]}' too, and it cannot tell "
            "them apart: keep one (tools=none, or env=none)"
        )
    cap, turns = cfg["grpo"].get("max_tool_calling_iterations"), cfg["env"]["max_turns"]
    if env == "feedback" and cap is not None and cap < turns:
        raise ConfigError(
            f"grpo.max_tool_calling_iterations={cap}: env=feedback needs at least env.max_turns={turns} "
            "tool-calling turns (one per answer submitted); raise it, or lower env.max_turns"
        )
    for key, spec in cfg["dataset"]["rewards"].items():
        fn = spec.get("fn", key) if isinstance(spec, Mapping) else key
        if spec is not None and fn in TOOL_REWARDS and not names:
            raise ConfigError(
                f"dataset.rewards.{key}: {fn} scores tool calls, and this run gives the model no tool: "
                "add tools= or env=, or drop it"
            )
    for name in (name for shot in few_shot(cfg["dataset"]) for name, _, _ in shot.tool_calls):
        if name not in names:
            shown = ", ".join(names) if names else "none (add tools= or env=)"
            raise ConfigError(
                f"dataset.few_shot: a worked example calls the tool '{name}', which this run does not give "
                f"the model; its tools: {shown}"
            )
