"""What an eval prints: one line of the fixed eval's numbers (greedy accuracy first, the cut-off count beside
it), then the chance line (first eval), the curriculum's levels, the transfer set, and a few examples."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

log = logging.getLogger(__name__)


def cut_off(rows: list[dict[str, Any]]) -> str:
    """ "12/128 cut off": completions that hit max_new_tokens before their end."""
    return f"{sum(r['truncated'] for r in rows)}/{len(rows)} cut off"


def log_eval(
    step: int,
    m: dict[str, float],
    examples: list[dict],
    fixed: list[dict],
    decoding: str,
    ks: list[int],
    print_examples: int,
    chance_line: str | None = None,
) -> None:
    """`examples`: every row scored, `fixed`: the fixed eval's among them; `chance_line`: chance.describe."""
    extra = "".join(f"  pass@{k} {m[f'pass@{k}']:.3f}" for k in ks)
    extra += f"  reward {m['reward']:.3f}" if "reward" in m else ""
    log.info(
        f"[eval step {step}] accuracy {m['accuracy']:.3f} ({decoding}){extra}  format {m['format']:.3f}  "
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
    for e in fixed[:print_examples]:
        completion = e["completion"][:300].replace("\n", "\\n")
        mark = "correct" if e["correct"] else "wrong"
        log.info(
            f"  Q: {e['question'][:200]}\n    completion: {completion}\n    extracted {e['extracted']!r} "
            f"by {e['rule']}; answer {e['answer']!r}: {mark} (score {e['score']:.2f})"
        )
