"""What an eval tells the user: its numbers, and its alarms: a last accuracy that does not clear the chance
line, and reward hacking (the train reward rising while the fixed-eval accuracy falls: the policy is paid for
something that is not the task), checked at each eval after the first and recorded in its JSON."""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

log = logging.getLogger(__name__)


def cut_off(rows: list[dict[str, Any]]) -> str:
    """ "12/128 cut off": completions that hit max_new_tokens before their end."""
    return f"{sum(r['truncated'] for r in rows)}/{len(rows)} cut off"


def log_eval(ev, step: int, m: dict[str, float], examples: list[dict], chance_line: str | None = None):
    """`ev`: the FixedEvaluator; `chance_line`: chance.describe, at the first eval."""
    from grpo_recipes.evaluation.metrics import fixed_examples

    fixed = fixed_examples(examples)
    extra = "".join(f"  pass@{k} {m[f'pass@{k}']:.3f}" for k in ev.ks)
    extra += f"  reward {m['reward']:.3f}" if "reward" in m else ""
    log.info(
        f"[eval step {step}] accuracy {m['accuracy']:.3f} ({ev.decoding}){extra}  format {m['format']:.3f}  "
        f"mean length {m['mean_length']:.1f}  {cut_off(fixed)}  ({m['num_examples']} problems, "
        f"{m['seconds']:.1f} s)"
    )
    if chance_line is not None:
        log.info(f"  chance {m['chance/accuracy']:.3f} (each task's best constant answer): {chance_line}")
    levels = defaultdict(list)
    for key, value in m.items():
        if key.startswith("level/"):
            task, level, _ = key.split("/", 1)[1].rsplit("/", 2)
            levels[task].append(f"{level}: {value:.2f}")
    for task, shares in levels.items():
        log.info(f"  {task} accuracy per curriculum level: {', '.join(shares)}")
    for name in sorted({e["eval_set"] for e in examples if e.get("eval_set") is not None}):
        rows = [e for e in examples if e.get("eval_set") == name]
        tasks = sorted({e["task"] for e in rows})
        per_task = ", ".join(f"{t} {m[f'{name}/{t}/accuracy']:.3f}" for t in tasks) if len(tasks) > 1 else ""
        log.info(
            f"  {name} set: accuracy {m[f'{name}/accuracy']:.3f}{f' ({per_task})' if per_task else ''}  "
            f"{cut_off(rows)}  ({len(rows)} problems, not in the headline)"
        )
    for e in fixed[: ev.settings["print_examples"]]:
        completion = e["completion"][:300].replace("\n", "\\n")
        mark = "correct" if e["correct"] else "wrong"
        log.info(
            f"  Q: {e['question'][:200]}\n    completion: {completion}\n    extracted {e['extracted']!r} "
            f"by {e['rule']}; answer {e['answer']!r}: {mark} (score {e['score']:.2f})"
        )


def warn_below_chance(step: int, accuracy: float, chance: float) -> None:
    if accuracy <= chance:
        log.warning(
            f"final fixed-eval accuracy {accuracy:.3f} (step {step}) does not clear the "
            f"chance line {chance:.3f} (each task's best constant answer, scored at the first eval)"
        )


def train_rewards(log_history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(step, mean train reward) of every logged train step (TRL logs it as `reward`)."""
    return [
        (int(h["step"]), float(h["reward"]))
        for h in log_history
        if isinstance(h.get("reward"), (int, float)) and math.isfinite(h["reward"]) and "step" in h
    ]


def check_hacking(rewards, step, previous_step, accuracy_before, accuracy_now, window, drop) -> dict | None:
    """The last `window` logged rewards up to `step` against the `window` logged before `previous_step` (none
    before it, at step 0: the first `window`, and `first_window`); None when nothing is logged."""
    logged = sorted(rewards)
    now = [r for s, r in logged if s <= step]
    if not now:
        return None
    before = [r for s, r in logged if s < previous_step][-window:]
    check = {"step": step, "previous_step": previous_step, "reward_before": fmean(before or now[:window])}
    check |= {"reward_now": fmean(now[-window:]), "accuracy_before": accuracy_before}
    check |= {"accuracy_now": accuracy_now, "window": window, "drop": drop, "first_window": not before}
    check["raised"] = check["reward_now"] > check["reward_before"] and accuracy_before - accuracy_now > drop
    return check


def alarm_message(c: dict[str, Any]) -> str:
    before = "the first steps" if c["first_window"] else f"before step {c['previous_step']}'s eval"
    return (
        f"reward hacking? the mean train reward over eval.hacking_window={c['window']} logged steps rose "
        f"{c['reward_before']:.3f} ({before}) -> {c['reward_now']:.3f} (before step {c['step']}'s eval) "
        f"while fixed-eval accuracy fell {c['accuracy_before']:.3f} (step {c['previous_step']}) -> "
        f"{c['accuracy_now']:.3f} (step {c['step']}), by more than eval.hacking_drop={c['drop']:g}"
    )


def record_hacking(path: Path, check: dict | None) -> None:
    """The check into its eval's JSON (`reward_hacking`, and the metric), and the warning when raised."""
    from grpo_recipes.outputs.logs import write_atomic

    raised = int(check is not None and check["raised"])
    result = json.loads(path.read_text())
    result["metrics"]["reward_hacking"] = raised
    if check is not None:
        result["reward_hacking"] = check
    write_atomic(path, json.dumps(result, indent=1))
    if raised:
        log.warning(alarm_message(check))
