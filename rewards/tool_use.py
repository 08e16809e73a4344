"""Reward terms over a tool rollout's turns (TRL passes `completions` as every message after the prompt: the
assistant turns, with their parsed `tool_calls`, and each tool result as a `tool` message), counted by the
rule the fixed eval counts with (grpo_common/tool_use.py): a call counts when its result reached the model.
Both are optional: off unless named in dataset.rewards."""

from __future__ import annotations

from grpo_common.tool_use import tool_use


def tool_format(ctx):
    """1 when the rollout made at least one tool call that parsed and ran (its result reached the model),
    else 0."""

    def reward(completions, **kwargs) -> list[float]:
        return [1.0 if tool_use(c).calls else 0.0 for c in completions]

    return reward


def tool_errors(ctx):
    """A penalty: minus the share of the rollout's tool replies that are errors (`error: ...`, or TRL's own
    reply for a tool that raised or does not exist); 0 without a call."""

    def reward(completions, **kwargs) -> list[float]:
        uses = [tool_use(c) for c in completions]
        return [-u.errors / u.calls if u.calls else 0.0 for u in uses]

    return reward
