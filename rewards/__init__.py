"""Reward functions in TRL's calling convention, a registry, and the answer-extraction chain."""
from rewards.extraction import Extraction, extract_answer, normalize_number
from rewards.format import format_ok
from rewards.registry import REWARDS, RewardContext, build_rewards, register_reward

__all__ = [
    "REWARDS", "Extraction", "RewardContext", "build_rewards", "extract_answer", "format_ok",
    "normalize_number", "register_reward",
]
