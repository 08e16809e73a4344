"""The rewards read from the task's verifier (ctx.judge) and the prompt format, and the train-side statistics
they log through TRL's `log_metric` hook."""

from __future__ import annotations

from collections import defaultdict
from itertools import groupby

from grpo_common.formats import get_format
from rewards.registry import completion_text, entries


def accuracy(ctx, mode="binary"):
    """graded: the verifier's partial credit in [0, 1]; binary: 1 if it is 1 else 0; signed: +1 correct,
    -1 otherwise (the REINFORCE-style reward of the digits recipe)."""

    def reward(prompts, completions, **kwargs):
        rows = entries(kwargs, len(completions))
        judged = ctx.judge([completion_text(c) for c in completions], rows)
        scores = [score for _, score in judged]
        correct = [s >= 1.0 for s in scores]
        wrong = 0.0 if mode == "binary" else -1.0
        out = scores if mode == "graded" else [1.0 if ok else wrong for ok in correct]
        if ctx.on_verdicts is not None:
            ctx.on_verdicts(kwargs, correct)
        log_stats(kwargs, rows, out, correct, judged)
        return out

    return reward


def correct_and_format(ctx, format_weight=0.1):
    """`1[correct] + format_weight * (1[format] - 1)`: the GSM8K recipe's combined reward."""
    fmt = get_format(ctx.prompt_format)

    def reward(prompts, completions, **kwargs):
        texts = [completion_text(c) for c in completions]
        correct = [score >= 1.0 for _, score in ctx.judge(texts, entries(kwargs, len(completions)))]
        if ctx.on_verdicts is not None:
            ctx.on_verdicts(kwargs, correct)
        formatted = [fmt.is_formatted(t) for t in texts]
        return [float(ok) + format_weight * (float(f) - 1.0) for f, ok in zip(formatted, correct)]

    return reward


def format_reward(ctx, mode="strict"):
    """1.0 when the completion follows the prompt format (`PromptFormat.is_formatted`, strict or soft)."""
    fmt, strict = get_format(ctx.prompt_format), mode == "strict"

    def reward(prompts, completions, **kwargs):
        return [float(fmt.is_formatted(completion_text(c), strict)) for c in completions]

    return reward


def prompt_groups(questions: list) -> list[list[int]]:
    """Each run of consecutive completions of one question (indices): a prompt's group, as TRL keeps it."""
    return [list(run) for _, run in groupby(range(len(questions)), key=questions.__getitem__)]


def log_stats(kwargs, rows, rewards, correct, judged) -> None:
    """Inside GRPOTrainer (which passes `log_metric`): accuracy/<task>, the share of correct completions;
    groups/{reward,answer}_varied, the share of prompt groups whose rewards, or extracted answers, differ (a
    group with equal rewards has zero advantage: it teaches nothing)."""
    log_metric = kwargs.get("log_metric")
    if not callable(log_metric):
        return
    per_task = defaultdict(list)
    for row, ok in zip(rows, correct):
        per_task[row.get("task", "unknown")].append(ok)
    for task, oks in per_task.items():
        log_metric(f"accuracy/{task}", sum(oks) / len(oks))
    groups = [g for g in prompt_groups([r.get("question", "") for r in rows]) if len(g) > 1]
    answers = [extraction.answer for extraction, _ in judged]
    for name, values in (("reward", rewards), ("answer", answers)) if groups else ():
        varied = sum(len({values[i] for i in g}) > 1 for g in groups)
        log_metric(f"groups/{name}_varied", varied / len(groups))
