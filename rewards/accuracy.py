"""Correctness from the task's own verifier, on the answer the prompt format reads (the judge)."""

from __future__ import annotations

from grpo_common.formats import get_format
from rewards.common import completion_text, entries
from rewards.train_stats import log_train_stats


def make_accuracy_reward(judge, mode: str = "binary", on_verdicts=None):
    """`judge(texts, entries) -> [(Extraction, score in [0, 1])]` (1 = correct): the task's verifier.

    mode: graded (the verifier's partial credit), binary (1 if score >= 1 else 0),
          signed (+1 correct, -1 otherwise: the REINFORCE-style reward of the digits recipe).
    on_verdicts(kwargs, correct): told each batch's verdicts (RewardContext.on_verdicts).
    """

    def reward(prompts, completions, **kwargs):
        rows = entries(kwargs, len(completions))
        judged = judge([completion_text(c) for c in completions], rows)
        answers = [extraction.answer for extraction, _ in judged]
        scores = [score for _, score in judged]
        correct = [s >= 1.0 for s in scores]
        if mode == "graded":
            out = scores
        else:
            out = [1.0 if ok else (0.0 if mode == "binary" else -1.0) for ok in correct]
        if on_verdicts is not None:
            on_verdicts(kwargs, correct)
        if callable(kwargs.get("log_metric")):  # inside GRPOTrainer: per-task accuracy, group variance
            log_train_stats(
                kwargs["log_metric"],
                [r.get("question", "") for r in rows],
                [r.get("task", "unknown") for r in rows],
                out,
                correct,
                answers,
            )
        return out

    return reward


def make_correct_and_format_reward(judge, prompt_format: str, format_weight: float = 0.1, on_verdicts=None):
    """`1[correct] + format_weight * (1[format] - 1)`: the GSM8K recipe's combined reward."""
    fmt = get_format(prompt_format)

    def reward(prompts, completions, **kwargs):
        texts = [completion_text(c) for c in completions]
        judged = judge(texts, entries(kwargs, len(completions)))
        correct = [score >= 1.0 for _, score in judged]
        if on_verdicts is not None:
            on_verdicts(kwargs, correct)
        return [
            float(ok) + format_weight * (float(fmt.is_formatted(text)) - 1.0)
            for text, ok in zip(texts, correct)
        ]

    return reward
