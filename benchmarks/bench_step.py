"""Targets 1, 2 and 6: the training step of the default recipe on the embedded model.

    python benchmarks/bench_step.py [--steps 6] [--trl-steps 3]

In one process, on the same model, data, batch (2 prompts x 8 completions) and completion length:
  floor  one sampled `generate` of the batch's completions + one forward/backward over the same
         tokens + an AdamW step, timed directly;
  ours   GRPOTrainer with this recipe's default config (grpo/default.yaml + hardware detection),
         with a breakdown: generation, reward, log-prob passes, backward, optimizer, the rest;
  trl    GRPOTrainer with TRL's own GRPOConfig defaults (gradient checkpointing, bf16, ...).
Reports medians over the steps after the first (warm-up), completion tokens trained per second,
and the process's peak RSS (the trainer's own figure for the full default run comes from
`/usr/bin/time -v python train_grpo.py`).
"""
from __future__ import annotations

import argparse
import copy
import resource
import statistics
import tempfile
import time
from collections import defaultdict

import torch
import yaml

from benchmarks.common import default_setup, git_rev, machine


class Timings:
    def __init__(self):
        self.parts = defaultdict(list)

    def wrap(self, obj, name: str, label: str):
        """Time every call of obj.<name> (instrumentation for this benchmark only)."""
        original = getattr(obj, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.parts[label].append(time.perf_counter() - start)

        setattr(obj, name, timed)


def run_trainer(model, tokenizer, train, reward_funcs, kwargs, steps: int, timings: Timings | None,
                recipe: bool = False):
    """recipe: with this package's fast paths (grpo_recipes.fast_paths), as train_grpo.py builds it."""
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_recipes import fast_paths

    step_times, tokens = [], []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_times.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * args.per_device_train_batch_size
                              * args.gradient_accumulation_steps)

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, max_steps=steps, logging_steps=1, save_strategy="no", report_to="none",
                          disable_tqdm=True, **kwargs)
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train,
                              processing_class=tokenizer, callbacks=[StepClock()])
        if recipe:
            print("fast paths:", ", ".join(fast_paths.apply(trainer)) or "none")
        if timings is not None:
            timings.wrap(trainer, "_generate", "generation")
            timings.wrap(trainer, "_calculate_rewards", "reward")
            timings.wrap(trainer, "_get_per_token_logps_and_entropies", "log-prob passes (forward)")
            timings.wrap(trainer.accelerator, "backward", "backward")
            original_create = trainer.create_optimizer  # the optimizer exists only once train() starts

            def create_and_time():
                optimizer = original_create()
                timings.wrap(optimizer, "step", "optimizer")
                return optimizer

            trainer.create_optimizer = create_and_time
        trainer.train()
    return step_times, tokens


def reset(model, state) -> None:
    """The starting weights, and the class's own forward/generate: each trainer patches the instance."""
    model.load_state_dict(state)
    for name in ("forward", "generate", "_original_forward"):
        model.__dict__.pop(name, None)


def floor_step(model, tokenizer, rows, completion_length: int, num_generations: int, steps: int, bf16: bool):
    """One generate + one forward/backward + AdamW step over the same sizes, timed directly, in the
    same precision as the recipe (bf16 autocast when it uses bf16)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    times, tokens = [], []
    per_step = 2
    for step in range(steps):
        batch = rows[step * per_step:(step + 1) * per_step]
        texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
                 for r in batch for _ in range(num_generations)]
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        start = time.perf_counter()
        model.eval()
        with torch.no_grad(), torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model.generate(**enc, max_new_tokens=completion_length, do_sample=True, temperature=1.0,
                                 top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id)
        model.train()
        mask = (out != tokenizer.pad_token_id).long()
        mask[:, : enc["input_ids"].shape[1]] = enc["attention_mask"]
        with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=out, attention_mask=mask).logits[:, enc["input_ids"].shape[1] - 1:-1]
        logps = torch.log_softmax(logits.float(), -1).gather(-1, out[:, enc["input_ids"].shape[1]:, None])
        loss = -logps.mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        tokens.append(int(mask[:, enc["input_ids"].shape[1]:].sum()))
    return times[1:], tokens[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--trl-steps", type=int, default=3)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="GRPOConfig overrides for our recipe, to try a variant (e.g. bf16=false)")
    parser.add_argument("--skip-trl", action="store_true", help="leave out the plain-TRL comparison")
    args = parser.parse_args()

    from grpo_recipes.config import build_grpo_kwargs, detect_hardware, resolve_activation_checkpointing
    from rewards import RewardContext, build_rewards

    cfg, taskset, train, eval_rows, model, tokenizer = default_setup(eval_size=8)
    hw = detect_hardware()
    funcs, weights = build_rewards(cfg["dataset"]["rewards"], RewardContext(taskset.score, "answer_tag"))
    ours = build_grpo_kwargs(cfg, hw, reward_weights=weights)
    resolve_activation_checkpointing(ours, model, hw, lora=False)
    for key in ("max_steps", "output_dir", "report_to", "logging_steps", "save_strategy", "save_steps",
                "save_total_limit", "run_name"):
        ours.pop(key, None)
    for item in args.set:
        key, value = item.split("=", 1)
        ours[key] = yaml.safe_load(value)
    batch = {k: ours[k] for k in ("per_device_train_batch_size", "num_generations", "max_completion_length")}
    print(f"machine: {machine()}; commit {git_rev()}")
    print(f"our recipe on this hardware: {'bf16 autocast' if ours.get('bf16') else 'fp32'}, activation checkpointing "
          f"{'on' if ours.get('activation_checkpointing') else 'off'}")
    print(f"batch: {batch['per_device_train_batch_size'] // batch['num_generations']} prompts x "
          f"{batch['num_generations']} completions, max {batch['max_completion_length']} tokens; medians after 1 warm-up step")

    base_state = copy.deepcopy(model.state_dict())
    rows = list(train)
    f_times, f_tokens = floor_step(model, tokenizer, rows, batch["max_completion_length"], batch["num_generations"],
                                   args.steps, bf16=bool(ours.get("bf16")))
    floor = statistics.median(f_times)

    reset(model, base_state)
    timings = Timings()
    o_all, o_tokens_all = run_trainer(model, tokenizer, train, funcs, ours, args.steps, timings, recipe=True)
    o_times, o_tokens = o_all[1:], o_tokens_all[1:]
    step = statistics.median(o_times)

    t_times, t_tokens = [float("nan")], [0]
    if not args.skip_trl:
        reset(model, base_state)
        plain = dict(batch, use_cpu=not hw.gpu)  # TRL's own defaults for everything else
        t_all, t_tokens_all = run_trainer(model, tokenizer, train, funcs, plain, args.trl_steps, None)
        t_times, t_tokens = t_all[1:], t_tokens_all[1:]

    def rate(tokens, times):
        return sum(tokens) / sum(times)

    print(f"\nfloor (generate + forward/backward + AdamW, same precision): {floor:6.2f} s/step, "
          f"{rate(f_tokens, f_times):6.1f} completion tokens/s")
    print(f"ours (default recipe):                     {step:6.2f} s/step, "
          f"{rate(o_tokens, o_times):6.1f} completion tokens/s")
    print(f"plain TRL defaults:                        {statistics.median(t_times):6.2f} s/step, "
          f"{rate(t_tokens, t_times):6.1f} completion tokens/s")
    print(f"\n1. step overhead, ours / floor:            {step / floor:5.2f}   (target <= 1.15)")
    print(f"2. tokens/s, ours / plain TRL defaults:    {rate(o_tokens, o_times) / rate(t_tokens, t_times):5.2f}   "
          "(target >= 3)")
    n = len(timings.parts["generation"]) or 1
    print("\nbreakdown of our step (mean over all steps, warm-up included):")
    accounted = 0.0
    for label in ("generation", "reward", "log-prob passes (forward)", "backward", "optimizer"):
        per_step = sum(timings.parts[label]) / n
        accounted += per_step
        print(f"  {label:28s} {per_step:6.2f} s")
    mean_step = sum(o_all) / len(o_all)  # the breakdown covers every step, warm-up included
    print(f"  {'the rest (data, logging, ...)':28s} {max(0.0, mean_step - accounted):6.2f} s")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    print(f"\npeak RSS of this benchmark process (three trainers in turn): {peak:.2f} GiB")


if __name__ == "__main__":
    main()
