"""Correctness from the task's own verifier, on the answer found by the extraction chain."""
from __future__ import annotations

from rewards.common import completion_text, entries
from rewards.extraction import extract_answer
from rewards.format import format_ok


def make_accuracy_reward(scorer, mode: str = "binary"):
    """`scorer(answer, entry) -> float in [0, 1]` (1 = correct).

    mode: graded (the verifier's partial credit), binary (1 if score >= 1 else 0),
          signed (+1 correct, -1 otherwise: the REINFORCE-style reward of the digits recipe).
    """

    def reward(prompts, completions, **kwargs):
        out = []
        for completion, entry in zip(completions, entries(kwargs, len(completions))):
            score = scorer(extract_answer(completion_text(completion)).answer, entry)
            if mode == "graded":
                out.append(score)
            elif mode == "binary":
                out.append(1.0 if score >= 1.0 else 0.0)
            else:
                out.append(1.0 if score >= 1.0 else -1.0)
        return out

    return reward


def make_correct_and_format_reward(scorer, prompt_format: str, format_weight: float = 0.1):
    """`1[correct] + format_weight * (1[format] - 1)`: the GSM8K recipe's combined reward."""

    def reward(prompts, completions, **kwargs):
        out = []
        for completion, entry in zip(completions, entries(kwargs, len(completions))):
            text = completion_text(completion)
            correct = scorer(extract_answer(text).answer, entry) >= 1.0
            out.append(float(correct) + format_weight * (float(format_ok(text, prompt_format)) - 1.0))
        return out

    return reward
