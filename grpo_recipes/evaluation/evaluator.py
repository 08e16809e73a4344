"""The fixed evaluation, in training (callback.py) and alone (`eval_only`): the same problems generated
greedily, written to `eval_results/eval_step_<N>.json`; every rank generates its shard, rank 0 writes. With
tools or an environment each problem is a multi-turn rollout through training's tool loop (tool_loop.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_common.formats import get_format
from grpo_common.tool_use import tool_use

# the eval's own marks on a row (`transfer`: which transfer set), not columns a reward is given
EVAL_MARKS = ("eval_level", "eval_set", "transfer")


def is_fixed(row: dict[str, Any]) -> bool:
    return all(row.get(mark) is None for mark in EVAL_MARKS)


def rank_shard(indices: list[int], rank: int, world: int) -> list[int]:
    """This rank's share of `indices`, padded with repeats so every rank generates the same number of
    prompts (collective generation, e.g. under ZeRO-3, would hang otherwise)."""
    shard, per_rank = indices[rank::world], -(-len(indices) // world)
    return shard + (shard[-1:] if shard else indices[:1]) * (per_rank - len(shard))


class FixedEvaluator:
    def __init__(
        self,
        rows,
        taskset,
        tokenizer,
        prompt_format: str,
        settings: dict[str, Any],
        *,
        max_new_tokens: int,
        response_prefix: str = "",
        rewards: Sequence[tuple[Callable, float]] = (),
        tools: Sequence[Callable] = (),
        max_tool_iterations: int | None = None,
        environment_factory: Callable[[], Any] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        self.rows, self.taskset, self.tokenizer = rows, taskset, tokenizer
        self.settings = settings  # the eval group (config/knobs.py Eval)
        self.prompt_format, self.max_new_tokens = prompt_format, max_new_tokens
        self.batch_size = settings["batch_size"]
        self.format = get_format(prompt_format)
        temperature = settings["temperature"]
        self.greedy_temperature = temperature if settings["do_sample"] else None  # None: greedy
        self.decoding = f"sampled at temperature {temperature:g}" if settings["do_sample"] else "greedy"
        # eval.pass_k: `samples` sampled completions per problem (0: none), pass@k for each k <= samples
        pass_k = settings["pass_k"]
        self.num_samples, self.sample_temperature = int(pass_k["samples"]), float(pass_k["temperature"])
        self.ks = [k for k in pass_k["k"] if k <= self.num_samples]
        self.response_prefix = response_prefix  # pre-filled by the chat template: part of the reply
        self.rewards = list(rewards)  # the run's, weighted: `reward` is what training pays the greedy reply
        self.loop = None  # with tools: training's tool loop, on prompts rendered as training renders them
        if tools or environment_factory:
            from grpo_recipes.evaluation.tool_loop import ToolLoop

            self.loop = ToolLoop(
                tokenizer,
                tools,
                max_tool_iterations,
                max_new_tokens,
                environment_factory,
                chat_template_kwargs,
            )
            # an environment's prompt is known once it is reset, at each eval; plain tools' once
            self.prompt_ids = None if environment_factory else [self.loop.render(r["prompt"]) for r in rows]
        else:
            self.texts = [
                tokenizer.apply_chat_template(
                    r["prompt"], add_generation_prompt=True, tokenize=False, **(chat_template_kwargs or {})
                )
                for r in rows
            ]

    def generate(self, model, indices: list[int], sampled: bool = False, progress: bool = False, agree=None):
        """Per index: (text, tokens, truncated), or `num_samples` of them. `model`: policy or generator;
        `agree(n)`: the largest n over the processes (the tool loop's turns), None: one process."""
        import torch

        from grpo_recipes.evaluation.generation import HFGenerator

        generator = model
        if isinstance(model, torch.nn.Module):
            generator = HFGenerator(model, self.tokenizer, self.batch_size, progress)
        n = self.num_samples if sampled else 1
        temperature = self.sample_temperature if sampled else self.greedy_temperature
        eos_ids = generator.eos_token_ids
        if self.loop is not None:
            environments = None
            if self.prompt_ids is None:  # a fresh environment per rollout, reset with the row's columns
                columns = [{k: v for k, v in self.rows[i].items() if k not in EVAL_MARKS} for i in indices]
                rows = [row for row in columns for _ in range(n)]
                prompt_ids, environments = self.loop.start(rows)
            else:
                prompt_ids = [self.prompt_ids[i] for i in indices for _ in range(n)]
            rollouts = self.loop.run(
                lambda ids, budget: [g[0] for g in generator.generate_ids(ids, 1, temperature, budget)],
                prompt_ids,
                eos_ids,
                environments,
                agree,
            )
            flat = [self._from_rollout(r, eos_ids) for r in rollouts]
            decoded = [flat[k * n : (k + 1) * n] for k in range(len(indices))]
        else:
            prompts = [self.texts[i] for i in indices]
            completions = generator.generate(prompts, n, temperature, self.max_new_tokens)
            decoded = [[self._decode(ids, eos_ids) for ids in group] for group in completions]
        return decoded if sampled else [group[0] for group in decoded]

    def _from_rollout(self, rollout, eos_ids: set[int]) -> tuple:
        """As _decode's, plus turns and environment: the text is the last assistant turn's (as the rewards
        read it), the length counts the model's tokens only (as TRL's)."""
        last = next((t for t in reversed(rollout.turns) if t.get("role") == "assistant"), {})
        text = self.response_prefix + str(last.get("content") or "")
        truncated = not rollout.ids or rollout.ids[-1] not in eos_ids
        return text, sum(rollout.mask), truncated, rollout.ids, rollout.turns, rollout.environment

    def _decode(self, ids: list[int], eos_ids: set[int]) -> tuple[str, int, bool, list[int]]:
        """(text, length, cut off at the limit, the completion's token ids up to its end)."""
        end = next((j + 1 for j, t in enumerate(ids) if t in eos_ids), None)  # None: cut off at the limit
        length = end or len(ids)
        text = self.tokenizer.decode(ids[:length], skip_special_tokens=True)
        return self.response_prefix + text, length, end is None, list(ids[:length])

    def score_batch(self, indices: list[int], greedy: list[tuple], samples: list | None = None) -> list[dict]:
        """Score a shard in one go: code tasks run all their programs in parallel."""
        rows = [self.rows[i] for i in indices]
        judged = self.taskset.judge([g[0] for g in greedy], rows)
        samples = samples or [None] * len(indices)
        flat = [(k, s[0]) for k, group in enumerate(samples) if group for s in group]
        sample_scores = self.taskset.judge([t for _, t in flat], [rows[k] for k, _ in flat]) if flat else []
        correct_counts = [0] * len(indices)
        for (k, _), (_, score) in zip(flat, sample_scores):
            correct_counts[k] += score >= 1.0
        rewards = self.reward_of(rows, greedy) if self.rewards else [None] * len(rows)
        out, is_formatted = [], self.format.is_formatted
        for k, (index, row, (completion, length, truncated, *rest), (extraction, score)) in enumerate(
            zip(indices, rows, greedy, judged)
        ):
            record = {"index": index, **{key: row[key] for key in ("task", "question", "answer")}}
            record |= {"completion": completion, "extracted": extraction.answer, "rule": extraction.rule}
            record |= {"score": score, "correct": score >= 1.0, "format_ok": is_formatted(completion)}
            record |= {"length": length, "truncated": truncated}
            record |= {mark: row[mark] for mark in EVAL_MARKS if row.get(mark) is not None}
            if samples[k] is not None:
                record |= {"num_samples": len(samples[k]), "samples_correct": correct_counts[k]}
            if rewards[k] is not None:
                record["reward"] = rewards[k]
            if self.loop is not None:  # every turn; calls counted as in training (grpo_common/tool_use.py)
                use = tool_use(rest[1])
                record |= {"tool_calls": use.calls, "tool_errors": use.errors, "turns": rest[1]}
                if hasattr(rest[2], "get_reward"):  # the environment's own reward, as TRL adds it
                    record["env_reward"] = float(rest[2].get_reward())
            out.append(record)
        return out

    def reward_of(self, rows: list[dict], greedy: list[tuple]) -> list[float]:
        """The weighted sum of the training rewards for the greedy replies, called as TRL calls them (without
        `log_metric`, so nothing is logged as training statistics)."""
        raw = [g[0][len(self.response_prefix) :] for g in greedy]  # the rewards add the prefix themselves
        # the columns TRL would pass (not the eval's own marks: a curriculum level, a transfer set)
        keys = [key for key in rows[0] if key != "prompt" and key not in EVAL_MARKS] if rows else []
        columns = {key: [r.get(key) for r in rows] for key in keys}
        # as TRL passes them: every turn of a tool rollout, else the one assistant message
        completions = [
            g[4] if len(g) > 4 else [{"role": "assistant", "content": c}] for g, c in zip(greedy, raw)
        ]
        environments = [g[5] if len(g) > 5 else None for g in greedy]
        if any(e is not None for e in environments):  # TRL hands rewards each rollout's environment
            columns["environments"] = environments
        totals = [0.0] * len(rows)
        for fn, weight in self.rewards:
            values = fn(
                prompts=[r["prompt"] for r in rows],
                completions=completions,
                completion_ids=[g[3] for g in greedy],
                **columns,
            )
            totals = [t + weight * (0.0 if v is None else float(v)) for t, v in zip(totals, values)]
        # an environment's own reward, with weight 1 as TRL adds it
        env_rewards = [e.get_reward() if hasattr(e, "get_reward") else 0.0 for e in environments]
        return [t + float(v) for t, v in zip(totals, env_rewards)]

    def run(
        self, model, accelerator, step: int, out_dir: Path, *, first=True, last=True, chance=None
    ) -> tuple[dict[str, float], list[dict]]:
        """Generate, score, write and print one eval. The transfer set is generated only at the run's `first`
        and `last` evals (eval_only: both), the first computes the chance line, the last warns when its
        accuracy does not clear it (`chance`: the first eval's `chance/accuracy`)."""
        from accelerate.utils import gather_object

        from grpo_recipes.evaluation.metrics import summarize

        start = time.time()
        rank, world, main = accelerator.process_index, accelerator.num_processes, accelerator.is_main_process
        fixed = [i for i, r in enumerate(self.rows) if is_fixed(r)]
        others = [  # per-level rows at every eval; a named set's at the first and the last
            i
            for i, r in enumerate(self.rows)
            if r.get("eval_level") is not None or ((first or last) and r.get("eval_set") is not None)
        ]
        fixed_shard = rank_shard(fixed, rank, world)
        shard = fixed_shard + rank_shard(others, rank, world)
        agree = None
        if world > 1:
            import torch

            def agree(n: int) -> int:  # the largest n over the processes
                return int(accelerator.reduce(torch.tensor(n, device=accelerator.device), "max").item())

        greedy = self.generate(model, shard, progress=main, agree=agree)
        sampled = [None] * len(shard)
        if self.num_samples:
            sampled[: len(fixed_shard)] = self.generate(model, fixed_shard, True, main, agree)
        local = self.score_batch(shard, greedy, sampled)
        examples = gather_object(local) if world > 1 else local
        examples = sorted({e["index"]: e for e in examples}.values(), key=lambda e: e["index"])
        metrics = summarize(examples, self.prompt_format, self.ks)
        result = {"step": step, "decoding": self.decoding, "max_new_tokens": self.max_new_tokens}
        result["metrics"] = metrics
        chance_line = None
        if main and first:  # rank 0 alone: code tasks' constants run in the sandbox
            from grpo_recipes.evaluation.chance import chance_metrics, chance_table, describe

            table, labels = chance_table([self.rows[i] for i in fixed], self.taskset)
            metrics.update(chance_metrics(table))
            result |= {"chance": table, "majority_labels": labels}
            chance, chance_line = metrics["chance/accuracy"], describe(table, labels)
        result["holdout"] = self.taskset.holdout  # {task: what its eval problems keep out of training}
        metrics["seconds"] = round(time.time() - start, 2)
        if main:
            from grpo_recipes.evaluation import console
            from grpo_recipes.outputs.logs import eval_file, write_atomic

            result |= {"verifiers": self.taskset.verifiers(), "examples": examples}
            write_atomic(eval_file(out_dir, step), json.dumps(result, indent=1))
            console.log_eval(self, step, metrics, examples, chance_line)
            if last and chance is not None:
                console.warn_below_chance(step, metrics["accuracy"], chance)
        return metrics, examples
