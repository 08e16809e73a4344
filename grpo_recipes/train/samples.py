"""samples.jsonl: what the model wrote during training, with what each reward gave it.

At step 1 and every `log_samples_every` steps, the first `log_samples_count` rollouts of the step's
generation batch are kept: step, task, prompt, completion, each reward component, the answer read
from it (and the rule that read it), the reference answer, and whether it was cut off at
grpo.max_completion_length. Watching them is how reward hacking is caught (a format reward earned
with no answer, an answer copied from the prompt ...).

The hook is TRL's reward calling convention: every reward function gets the batch's prompts,
completions, completion_ids and the dataset columns, and TRL calls them one after another on the
same batch; a thin wrapper (same `__name__`, so TRL's metric names do not change) keeps its scores
next to the completions. The callback writes the step's records when the step ends, and hands
them to the trackers as a table (wandb.Table, trackio.Table) when one of them is on.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rewards.common import completion_text, entries

TABLE_COLUMNS = (
    "step",
    "task",
    "prompt",
    "completion",
    "rewards",
    "extracted",
    "rule",
    "answer",
    "truncated",
)


def wanted(step: int, every: int) -> bool:
    """Step 1 (before the model has learned anything) and every `every` steps; 0: never."""
    return every > 0 and (step == 1 or step % every == 0)


def prompt_text(prompt: Any) -> str:
    """The user's message of a chat prompt (the system prompt is the same in every row), or the text."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else completion_text(prompt)
    return str(prompt)


class SampleRecorder(TrainerCallback):
    """Wraps the reward functions (`wrap`) and, as a trainer callback, writes samples.jsonl."""

    def __init__(
        self,
        path: Path,
        every: int,
        count: int,
        judge: Callable[[list[str], list[dict]], list],
        max_completion_length: int,
        eos_token_ids: set[int],
        report_to: list[str],
    ):
        self.path, self.every, self.count = Path(path), every, count
        # TaskSet.judge with the response prefix: the extracted answer, as the reward read it
        self.judge = judge
        self.max_completion_length = max_completion_length
        self.eos_token_ids = eos_token_ids
        self.report_to = report_to  # the trackers on (TRL's report_to): the table goes to wandb, trackio
        self.pending: dict[int, dict[str, Any]] = {}  # step -> the batch being recorded

    def wrap(self, reward_funcs: list[Callable]) -> list[Callable]:
        return [self._wrapped(f) for f in reward_funcs]

    def _wrapped(self, fn: Callable) -> Callable:
        @functools.wraps(fn)  # TRL names the reward's metrics by __name__
        def reward(prompts, completions, completion_ids=None, **kwargs):
            scores = fn(prompts, completions, completion_ids=completion_ids, **kwargs)
            state = kwargs.get("trainer_state")
            if state is not None:
                self._keep(
                    state.global_step + 1, fn.__name__, prompts, completions, completion_ids, kwargs, scores
                )
            return scores

        return reward

    def _keep(self, step, name, prompts, completions, completion_ids, kwargs, scores) -> None:
        if not wanted(step, self.every):
            return
        batch = self.pending.get(step)
        if batch is None:
            n = min(self.count, len(completions))
            # TRL hands every reward the same list (its id marks the batch): later batches are skipped
            batch = self.pending[step] = {
                "id": id(completions),
                "prompts": prompts[:n],
                "completions": completions[:n],
                "ids": list(completion_ids[:n]) if completion_ids is not None else [None] * n,
                "rows": entries(kwargs, n),
                "rewards": {},
            }
        if batch["id"] == id(completions):
            batch["rewards"][name] = [None if s is None else float(s) for s in scores[: len(batch["rows"])]]

    def records(self, step: int) -> list[dict[str, Any]]:
        batch = self.pending.pop(step, None)
        if batch is None:
            return []
        texts = [completion_text(c) for c in batch["completions"]]
        judged = self.judge(texts, batch["rows"]) if batch["rows"] else []
        out = []
        for i, text in enumerate(texts):
            row, ids = batch["rows"][i], batch["ids"][i]
            extraction = judged[i][0] if i < len(judged) else None
            out.append(
                {
                    "step": step,
                    "task": row.get("task"),
                    "prompt": prompt_text(batch["prompts"][i]),
                    "completion": text,
                    "rewards": {name: scores[i] for name, scores in batch["rewards"].items()},
                    "extracted": extraction.answer if extraction is not None else None,
                    "rule": extraction.rule if extraction is not None else None,
                    "answer": row.get("answer"),
                    "truncated": self.truncated(ids),
                }
            )
        return out

    def truncated(self, ids: list[int] | None) -> bool | None:
        """Cut off at max_completion_length: as long as allowed and not ended by an end-of-sequence token."""
        if ids is None:
            return None
        ids = list(ids)
        return len(ids) >= self.max_completion_length and (not ids or ids[-1] not in self.eos_token_ids)

    def on_step_end(self, args, state, control, **kwargs):
        for step in sorted(s for s in self.pending if s <= state.global_step):
            rows = self.records(step)
            if rows and state.is_world_process_zero:
                write_samples(self.path, rows)
                self._to_trackers(rows, step)

    def _to_trackers(self, rows: list[dict[str, Any]], step: int) -> None:
        table = [[json.dumps(r[c]) if c == "rewards" else r[c] for c in TABLE_COLUMNS] for r in rows]
        wandb = sys.modules.get("wandb")
        if "wandb" in self.report_to and wandb is not None and wandb.run is not None:
            wandb.log({"train/samples": wandb.Table(columns=list(TABLE_COLUMNS), data=table)})
        trackio = sys.modules.get("trackio")
        if "trackio" in self.report_to and trackio is not None:
            trackio.log(
                {
                    "train/samples": trackio.Table(columns=list(TABLE_COLUMNS), data=table),
                    "train/global_step": step,
                }
            )


def write_samples(path: Path, rows: list[dict[str, Any]]) -> None:
    """Appended whole and synced, like metrics.jsonl: an interrupted run keeps every step written."""
    with open(path, "a") as f:
        f.write("".join(json.dumps(r, default=str) + "\n" for r in rows))
        f.flush()
        os.fsync(f.fileno())


def read_samples(path: Path) -> dict[int, list[dict[str, Any]]]:
    """samples.jsonl by step (a line cut by a crash is skipped)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    if not path.is_file():
        return by_step
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        by_step.setdefault(int(row["step"]), []).append(row)
    return dict(sorted(by_step.items()))
