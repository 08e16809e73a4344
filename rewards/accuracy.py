"""Correctness from the task's own verifier, on the answer found by the extraction chain."""
from __future__ import annotations

from rewards.common import completion_text, entries
from rewards.extraction import extract_answer
from rewards.format import format_ok
from rewards.train_stats import log_train_stats


def make_accuracy_reward(scorer, mode: str = "binary"):
    """`scorer(answer, entry) -> float in [0, 1]` (1 = correct).

    mode: graded (the verifier's partial credit), binary (1 if score >= 1 else 0),
          signed (+1 correct, -1 otherwise: the REINFORCE-style reward of the digits recipe).
    """

    def reward(prompts, completions, **kwargs):
        rows = entries(kwargs, len(completions))
        answers = [extract_answer(completion_text(c)).answer for c in completions]
        scores = [scorer(a, e) for a, e in zip(answers, rows)]
        correct = [s >= 1.0 for s in scores]
        if mode == "graded":
            out = scores
        else:
            out = [1.0 if ok else (0.0 if mode == "binary" else -1.0) for ok in correct]
        if callable(kwargs.get("log_metric")):  # inside GRPOTrainer: per-task accuracy, group variance
            log_train_stats(kwargs["log_metric"], [r.get("question", "") for r in rows],
                            [r.get("task", "unknown") for r in rows], out, correct, answers)
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
