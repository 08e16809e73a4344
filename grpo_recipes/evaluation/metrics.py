"""The fixed eval's numbers from its scored rows."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from grpo_common.formats import reader
from grpo_recipes.evaluation.evaluator import is_fixed


def fixed_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if is_fixed(r)]


def usage_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Tool metrics over records with `tool_calls`, `tool_errors` and `correct` (an accuracy is left out
    where its group is empty)."""
    n = max(len(rows), 1)
    used = [r for r in rows if r["tool_calls"]]
    unused = [r for r in rows if not r["tool_calls"]]
    calls, errors = sum(r["tool_calls"] for r in rows), sum(r["tool_errors"] for r in rows)
    out = {
        "tools/calls_per_problem": calls / n,
        "tools/used": len(used) / n,
        "tools/errors_per_problem": errors / n,
        "tools/error_rate": errors / calls if calls else 0.0,
    }
    for name, group in (("with_tool", used), ("without_tool", unused)):
        if group:
            out[f"tools/accuracy_{name}"] = sum(bool(r["correct"]) for r in group) / len(group)
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / max(len(rows), 1)


def summarize(examples: list[dict[str, Any]], prompt_format: str, ks: list[int] = ()) -> dict[str, float]:
    """Overall and per-task accuracy (score >= 1), mean score, format, length, the share of each extraction
    rule, and pass@k from sampled counts; the curriculum's levels and the transfer sets apart."""
    answers, programs = reader(prompt_format, code_task=False), reader(prompt_format, code_task=True)
    named = {"accuracy": "correct", "mean_score": "score", "format": "format_ok", "mean_length": "length"}
    named |= {"truncated": "truncated"}

    def block(rows: list[dict[str, Any]], prefix: str) -> dict[str, float]:
        n, rules = max(len(rows), 1), Counter(r["rule"] for r in rows)
        out = {f"{prefix}{name}": _mean(rows, key) for name, key in named.items()}
        if rows and all("reward" in r for r in rows):
            out[f"{prefix}reward"] = _mean(rows, "reward")
        if rows and all("tool_calls" in r for r in rows):
            out.update({f"{prefix}{k}": v for k, v in usage_metrics(rows).items()})
        if rows and all("env_reward" in r for r in rows):
            out[f"{prefix}env/reward"] = _mean(rows, "env_reward")
        code = [rule for rule in programs.rules if rule in rules and rule not in answers.rules]
        out.update({f"{prefix}rule/{rule}": rules[rule] / n for rule in [*answers.rules, *code]})
        for k in ks:
            out[f"{prefix}pass@{k}"] = (
                sum(pass_at_k(r["num_samples"], r["samples_correct"], k) for r in rows) / n
            )
        return out

    fixed = fixed_examples(examples)
    metrics = {"num_examples": len(fixed), **block(fixed, "")}
    for task in sorted({r["task"] for r in fixed}):
        metrics.update(block([r for r in fixed if r["task"] == task], f"{task}/"))
    levels, sets = defaultdict(list), defaultdict(list)
    for r in examples:
        if r.get("eval_level") is not None:
            levels[r["task"], r["eval_level"]].append(r)
        if r.get("eval_set") is not None:
            sets[r["eval_set"]].append(r)
    for (task, level), rows in sorted(levels.items()):
        metrics[f"level/{task}/{level}/accuracy"] = _mean(rows, "correct")
    for name, rows in sorted(sets.items()):
        metrics[f"{name}/accuracy"] = _mean(rows, "correct")
        metrics[f"{name}/truncated"] = _mean(rows, "truncated")
        for task in sorted({r["task"] for r in rows}):
            metrics[f"{name}/{task}/accuracy"] = _mean([r for r in rows if r["task"] == task], "correct")
    return metrics
