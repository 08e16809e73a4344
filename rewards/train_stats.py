"""Train-side statistics logged from inside the accuracy reward through TRL's `log_metric` hook.

- accuracy/<task>:       share of completions that are correct, per task
- groups/reward_varied:  share of prompt groups whose rewards differ (a group with equal rewards
                         has zero advantage and teaches nothing)
- groups/answer_varied:  share of prompt groups whose extracted answers differ (exploration)
A group is a run of consecutive completions of the same question (TRL keeps groups together).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from itertools import groupby


def log_train_stats(
    log_metric: Callable[[str, float], None],
    questions: list[str],
    tasks: list[str],
    rewards: list[float],
    correct: list[bool],
    answers: list[str | None],
) -> None:
    per_task = defaultdict(list)
    for task, ok in zip(tasks, correct):
        per_task[task].append(ok)
    for task, oks in per_task.items():
        log_metric(f"accuracy/{task}", sum(oks) / len(oks))

    groups = [[i for i, _ in run] for _, run in groupby(enumerate(questions), key=lambda x: x[1])]
    groups = [g for g in groups if len(g) > 1]
    if groups:
        log_metric(
            "groups/reward_varied", sum(len({rewards[i] for i in g}) > 1 for g in groups) / len(groups)
        )
        log_metric(
            "groups/answer_varied", sum(len({answers[i] for i in g}) > 1 for g in groups) / len(groups)
        )
