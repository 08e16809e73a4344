"""samples.jsonl (README "What the model wrote"): the first `log_samples_count` rollouts at step 1 and every
`log_samples_every` steps, with each reward's score (the reward functions are wrapped to keep them). With
tools or an environment, each rollout's turns too (role, content, tool calls), its tool calls and errors
counted as the fixed eval counts them (grpo_common/tool_use.py), and the environment's own reward."""

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_recipes.outputs.logs import append_jsonl, read_jsonl
from rewards.registry import completion_text, entries


def wanted(step: int, every: int) -> bool:
    return every > 0 and (step == 1 or step % every == 0)


def prompt_text(prompt: Any) -> str:
    """The user's message of a chat prompt (the system prompt is every row's), or the text."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else completion_text(prompt)
    return str(prompt)


def turn_records(completion: Any) -> list[dict[str, Any]]:
    """Each turn of a rollout: role, content, an assistant turn's tool calls, a tool result's tool name."""
    if not isinstance(completion, list):
        return [{"role": "assistant", "content": completion_text(completion)}]
    keep = ("role", "content", "tool_calls", "name")
    return [{k: m[k] for k in keep if m.get(k) is not None} for m in completion if isinstance(m, dict)]


class SampleRecorder(TrainerCallback):
    def __init__(self, path, every, count, judge, eos_token_ids, tools=False):
        self.path, self.every, self.count = Path(path), every, count
        self.judge = judge  # TaskSet.judge(texts, rows) with the response prefix, as the rewards read
        self.eos_token_ids = eos_token_ids
        self.tools = tools  # the run gives the model tools or an environment: record each rollout's turns
        self.pending: dict[int, dict[str, Any]] = {}  # step -> the batch being recorded

    def wrap(self, reward_funcs: list[Callable]) -> list[Callable]:
        def wrapped(fn: Callable) -> Callable:
            @functools.wraps(fn)  # TRL names the reward's metrics by __name__
            def reward(prompts, completions, completion_ids=None, **kwargs):
                # as TRL calls every reward: by keyword (a reward written as TRL's docs show runs unchanged)
                scores = fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
                self._keep(fn.__name__, scores, prompts, completions, completion_ids, kwargs)
                return scores

            return reward

        return [wrapped(f) for f in reward_funcs]

    def _keep(self, name, scores, prompts, completions, completion_ids, kwargs) -> None:
        state = kwargs.get("trainer_state")
        if state is None or not wanted(step := state.global_step + 1, self.every):
            return
        if step not in self.pending:
            n = min(self.count, len(completions))
            entries_ = entries(kwargs, n)
            rows = [
                {
                    "step": step,
                    "task": row.get("task"),
                    "prompt": prompt_text(prompt),
                    "completion": completion_text(completion),
                    "rewards": {},
                    "extracted": None,
                    "rule": None,
                    "answer": row.get("answer"),
                    "truncated": None,  # read from the token ids with TRL's args (records)
                }
                for prompt, completion, row in zip(prompts, completions, entries_)
            ]
            if self.tools:
                from grpo_common.tool_use import tool_use  # only a tool run counts tool turns

                for row, completion in zip(rows, completions):
                    use = tool_use(completion)
                    row |= {
                        "tool_calls": use.calls,
                        "tool_errors": use.errors,
                        "turns": turn_records(completion),
                    }
            for row, environment in zip(rows, kwargs.get("environments") or []):
                if hasattr(environment, "get_reward"):  # TRL adds it as a reward named after the class
                    row["rewards"][type(environment).__name__] = float(environment.get_reward())
            ids = list(completion_ids[:n]) if completion_ids is not None else [None] * n
            # TRL hands every reward the same list (its id marks the batch): later batches are skipped
            self.pending[step] = {"id": id(completions), "rows": rows, "entries": entries_, "ids": ids}
        if self.pending[step]["id"] == id(completions):
            for row, score in zip(self.pending[step]["rows"], scores):
                row["rewards"][name] = None if score is None else float(score)

    def records(self, step: int, args) -> list[dict[str, Any]]:
        batch = self.pending.pop(step)
        rows = batch["rows"]
        judged = self.judge([r["completion"] for r in rows], batch["entries"]) if rows else []
        for row, (extraction, *_) in zip(rows, judged):
            if extraction is not None:
                row["extracted"], row["rule"] = extraction.answer, extraction.rule
        for row, ids in zip(rows, batch["ids"]):
            if ids is not None:  # cut off: the length limit reached without an end-of-sequence token
                full = len(ids) >= args.max_completion_length
                row["truncated"] = full and (not len(ids) or ids[-1] not in self.eos_token_ids)
        return rows

    def on_step_end(self, args, state, control, **kwargs):
        for step in sorted(s for s in self.pending if s <= state.global_step):
            rows = self.records(step, args)
            if rows and state.is_world_process_zero:
                append_jsonl(self.path, rows)  # whole and synced: an interrupted run keeps every step written
                self._to_trackers(rows, step, args.report_to)

    @staticmethod
    def _to_trackers(rows: list[dict[str, Any]], step: int, report_to: list[str]) -> None:
        columns = list(rows[0])  # the record's keys, in order
        table = [[json.dumps(r[c]) if c in ("rewards", "turns") else r[c] for c in columns] for r in rows]
        wandb = sys.modules.get("wandb")
        if "wandb" in report_to and wandb is not None and wandb.run is not None:
            wandb.log({"train/samples": wandb.Table(columns=columns, data=table)})
        trackio = sys.modules.get("trackio")
        if "trackio" in report_to and trackio is not None:
            samples = trackio.Table(columns=columns, data=table)
            trackio.log({"train/samples": samples, "train/global_step": step})


def read_samples(path: Path) -> dict[int, list[dict[str, Any]]]:
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in read_jsonl(path):
        by_step.setdefault(int(row["step"]), []).append(row)
    return dict(sorted(by_step.items()))
