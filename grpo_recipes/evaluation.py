"""The fixed evaluation: the same problems, generated greedily in batches, at step 0 (before any
update), every `eval.every_n_steps` steps and at the end of training.

Writes `eval_results/eval_step_<N>.json` (metrics + every example) and sends `eval/...`
metrics through the trainer's callbacks, so every tracker and metrics.jsonl get them.
Every rank generates its shard (ZeRO-3 gathers weights collectively); rank 0 writes.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl

from rewards.extraction import RULES, extract_answer
from rewards.format import format_ok

log = logging.getLogger(__name__)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Readers never see a half-written file: write a sibling, then rename over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def summarize(examples: list[dict[str, Any]]) -> dict[str, float]:
    """Overall and per-task accuracy (score >= 1), mean score, format compliance, length, rule shares."""

    def block(rows: list[dict[str, Any]], prefix: str) -> dict[str, float]:
        n = max(len(rows), 1)
        rules = Counter(r["rule"] for r in rows)
        out = {
            f"{prefix}accuracy": sum(r["correct"] for r in rows) / n,
            f"{prefix}mean_score": sum(r["score"] for r in rows) / n,
            f"{prefix}format": sum(r["format_ok"] for r in rows) / n,
            f"{prefix}mean_length": sum(r["length"] for r in rows) / n,
            f"{prefix}truncated": sum(r["truncated"] for r in rows) / n,
        }
        out.update({f"{prefix}rule/{rule}": rules.get(rule, 0) / n for rule in RULES})
        return out

    by_task = defaultdict(list)
    for r in examples:
        by_task[r["task"]].append(r)
    metrics = {"num_examples": len(examples), **block(examples, "")}
    for task, rows in sorted(by_task.items()):
        metrics.update(block(rows, f"{task}/"))
    return metrics


class FixedEvaluator:
    """Generates and scores the fixed eval set with a model; knows nothing about training."""

    def __init__(self, rows, taskset, tokenizer, prompt_format: str, max_new_tokens: int, batch_size: int = 64,
                 do_sample: bool = False, temperature: float = 1.0):
        self.rows, self.taskset, self.tokenizer = rows, taskset, tokenizer
        self.prompt_format, self.max_new_tokens, self.batch_size = prompt_format, max_new_tokens, batch_size
        self.do_sample, self.temperature = do_sample, temperature
        self.texts = [
            tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows
        ]

    def generate(self, model, indices: list[int]) -> list[tuple[str, int, bool]]:
        """(completion text, completion tokens, truncated) for the rows at `indices`, in order."""
        import torch
        from transformers import GenerationConfig

        tok = self.tokenizer
        eos = model.generation_config.eos_token_id or tok.eos_token_id
        config = GenerationConfig(
            max_new_tokens=self.max_new_tokens, do_sample=self.do_sample,
            temperature=self.temperature if self.do_sample else None, top_p=None, top_k=None,
            eos_token_id=eos, pad_token_id=tok.pad_token_id, use_cache=True,
        )
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        device = next(model.parameters()).device
        out = []
        for start in range(0, len(indices), self.batch_size):
            batch = [self.texts[i] for i in indices[start:start + self.batch_size]]
            enc = tok(batch, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
            enc = {k: v.to(device) for k, v in enc.items()}
            with torch.no_grad():
                generated = model.generate(**enc, generation_config=config)
            for ids in generated[:, enc["input_ids"].shape[1]:].tolist():
                length = next((j + 1 for j, t in enumerate(ids) if t in eos_ids), None)
                truncated = length is None
                length = len(ids) if truncated else length
                while truncated and length and ids[length - 1] == tok.pad_token_id and tok.pad_token_id not in eos_ids:
                    length -= 1
                out.append((tok.decode(ids[:length], skip_special_tokens=True), length, truncated))
        return out

    def score(self, index: int, completion: str, length: int, truncated: bool) -> dict[str, Any]:
        row = self.rows[index]
        extraction = extract_answer(completion)
        score = self.taskset.score(extraction.answer, row)
        return {
            "index": index, "task": row["task"], "question": row["question"], "answer": row["answer"],
            "completion": completion, "extracted": extraction.answer, "rule": extraction.rule,
            "score": score, "correct": score >= 1.0, "format_ok": format_ok(completion, self.prompt_format),
            "length": length, "truncated": truncated,
        }


class FixedEvalCallback(TrainerCallback):
    """Runs the FixedEvaluator at step 0, every N steps and at the end. `attach(trainer)` before train()."""

    def __init__(self, evaluator: FixedEvaluator, output_dir: str | Path, every_n_steps: int = 0):
        self.evaluator = evaluator
        self.dir = Path(output_dir) / "eval_results"
        self.every = int(every_n_steps or 0)
        self.trainer = None
        self.done_steps: set[int] = set()
        self.history: dict[int, dict[str, float]] = {}

    def attach(self, trainer) -> "FixedEvalCallback":
        self.trainer = trainer
        return self

    # -- events -------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0 or not (self.dir / f"eval_step_{state.global_step}.json").exists():
            self.evaluate(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.every and state.global_step % self.every == 0:
            self.evaluate(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if state.global_step not in self.done_steps:
            self.evaluate(state.global_step)

    # -- work ---------------------------------------------------------------------------------
    def evaluate(self, step: int) -> dict[str, float]:
        from accelerate.utils import gather_object
        from trl.models import unwrap_model_for_generation

        trainer = self.trainer
        acc = trainer.accelerator
        start = time.time()
        n = len(self.evaluator.rows)
        # Equal shards on every rank (padded with repeats) so collective generation cannot hang.
        shard = list(range(acc.process_index, n, acc.num_processes))
        per_rank = -(-n // acc.num_processes)
        shard += shard[-1:] * (per_rank - len(shard)) if shard else [0] * per_rank
        model = trainer.model_wrapped
        was_training = trainer.model.training
        trainer.model.eval()
        try:
            with unwrap_model_for_generation(model, acc) as unwrapped:
                generated = self.evaluator.generate(unwrapped, shard)
        finally:
            trainer.model.train(was_training)
        local = [self.evaluator.score(i, *g) for i, g in zip(shard, generated)]
        examples = gather_object(local) if acc.num_processes > 1 else local
        examples = sorted({e["index"]: e for e in examples}.values(), key=lambda e: e["index"])
        metrics = summarize(examples)
        metrics["seconds"] = round(time.time() - start, 2)
        self.done_steps.add(step)
        self.history[step] = metrics
        if acc.is_main_process:
            write_json_atomic(self.dir / f"eval_step_{step}.json", {"step": step, "metrics": metrics,
                                                                     "examples": examples})
            log.info("[eval step %d] accuracy %.3f  format %.3f  mean length %.1f  (%d problems, %.1f s)",
                     step, metrics["accuracy"], metrics["format"], metrics["mean_length"], len(examples),
                     metrics["seconds"])
        logs = {f"eval/{k}": v for k, v in metrics.items()}
        # A fresh TrainerControl: CallbackHandler.on_log resets `should_log`, which would drop this
        # step's train log line if the trainer's own control object were passed.
        trainer.callback_handler.on_log(trainer.args, trainer.state, TrainerControl(), logs)
        return metrics
