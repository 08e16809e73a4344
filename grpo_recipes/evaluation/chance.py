"""The chance line: what constant answers score on the fixed eval by each task's own verifier, computed at the
first eval (a 13 Yes / 11 No syllogism set pays 54 % for "Yes" every time)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

# the most common reference answer (not for code: a reference program solves its own problem only), the empty
# answer, and (code tasks) a program returning the prompt's example output whatever the input
CONSTANTS = ("majority", "empty", "example_output")


def example_program(row: dict[str, Any]) -> str | None:
    """`def <entry_point>(*args, **kwargs): return <example output>` for a Python row, else None."""
    meta = row.get("metadata")
    meta = json.loads(meta) if isinstance(meta, str) else meta or {}
    entry, language = meta.get("entry_point"), meta.get("language") or "python"
    if "example_output" not in meta or not entry or language != "python":
        return None
    return f"def {entry}(*args, **kwargs):\n    return {meta['example_output']!r}\n"


def _scores(taskset, code: bool, answers: list[str | None], rows: list[dict]) -> list[float]:
    if code:  # a program goes through the reader and the sandbox, as a completion's does
        texts = [f"```\n{a}\n```" if a else "" for a in answers]
        return [score for _, score in taskset.judge(texts, rows)]
    return [taskset.score(a, row) for a, row in zip(answers, rows)]


def chance_table(rows: list[dict[str, Any]], taskset) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """({task: {constant: accuracy}}, {task: its majority label}), plus "all tasks": each constant over every
    row and `best`, each task's best constant."""
    from tasks.registry import is_code_task

    by_task: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    table, labels, best_correct = {}, {}, 0.0
    overall: Counter[str] = Counter()
    for task, task_rows in sorted(by_task.items()):
        n, code = len(task_rows), is_code_task(task)
        answers = {"empty": [""] * n}
        programs = [example_program(r) for r in task_rows]
        if not code:
            labels[task] = Counter(r["answer"] for r in task_rows).most_common(1)[0][0]  # ties: first seen
            answers = {"majority": [labels[task]] * n, **answers}
        elif any(programs):
            answers["example_output"] = programs
        correct = {
            name: sum(s >= 1.0 for s in _scores(taskset, code, given, task_rows))
            for name, given in answers.items()
        }
        table[task] = {name: c / n for name, c in correct.items()}
        overall.update(correct)
        best_correct += max(correct.values())
    total = len(rows) or 1
    table["all tasks"] = {name: overall[name] / total for name in CONSTANTS if name in overall}
    table["all tasks"]["best"] = best_correct / total
    return table, labels


def chance_metrics(table: dict[str, dict[str, float]]) -> dict[str, float]:
    """`chance/accuracy` (each task's best constant, over all rows) and `chance/<task>/accuracy`."""
    out = {"chance/accuracy": table["all tasks"]["best"]}
    out |= {f"chance/{task}/accuracy": max(v.values()) for task, v in table.items() if task != "all tasks"}
    return out


def describe(table: dict[str, dict[str, float]], labels: dict[str, str]) -> str:
    """One line: each task's constants and their accuracy ("syllogism: majority 'Yes' 54.2 %, ...")."""

    def named(task: str, name: str) -> str:
        return f"{name} {labels[task][:40]!r}" if name == "majority" else name.replace("_", " ")

    return "; ".join(
        f"{task}: " + ", ".join(f"{named(task, n)} {v:.1%}" for n, v in scores.items())
        for task, scores in table.items()
        if task != "all tasks"
    )
