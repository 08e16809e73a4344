"""Format compliance: does the completion present its answer the way the prompt format asks?
The format decides (`PromptFormat.is_formatted`, strict or soft: grpo_common/formats.py)."""

from __future__ import annotations

from grpo_common.formats import get_format
from rewards.common import completion_text


def make_format_reward(prompt_format: str, mode: str = "strict"):
    """1.0 when the completion follows `prompt_format` (`mode`: strict | soft), else 0.0."""
    fmt, strict = get_format(prompt_format), mode == "strict"

    def reward(prompts, completions, **kwargs):
        return [float(fmt.is_formatted(completion_text(c), strict)) for c in completions]

    return reward
