"""Reward functions in TRL's calling convention and a registry (name -> factory). Reading answers and
checking formats belong to the prompt formats (grpo_common/formats.py)."""

from rewards.registry import REWARDS, RewardContext, build_rewards

__all__ = ["REWARDS", "RewardContext", "build_rewards"]
