"""Reward functions in TRL's calling convention and their registry (registry.py); reading answers and checking
formats belong to the prompt formats (grpo_common/formats.py)."""

from rewards.registry import REWARDS, RewardContext, build_rewards  # noqa: F401
