"""Reward terms over a tool rollout's turns (TRL's `completions`: every message after the prompt), counted by
the fixed eval's rule (grpo_common/tool_use.py): a call counts when its result reached the model."""

from __future__ import annotations

from grpo_common.tool_use import tool_use


def tool_format(ctx):
    """1 when at least one tool call of the rollout ran, else 0."""

    def reward(completions, **kwargs) -> list[float]:
        return [1.0 if tool_use(c).calls else 0.0 for c in completions]

    return reward


def tool_errors(ctx):
    """A penalty: minus the share of the rollout's tool replies that are errors (`error: ...`, or TRL's own
    reply for a tool that raised or does not exist); 0 without a call."""

    def reward(completions, **kwargs) -> list[float]:
        return [-u.errors / u.calls if u.calls else 0.0 for u in map(tool_use, completions)]

    return reward
