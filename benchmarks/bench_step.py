"""Targets 1, 2, 6 and 7: the training step of the default recipe, against a floor and plain TRL.

    python -m benchmarks.bench_step [--steps 6] [--trl-steps 3]
    python -m benchmarks.bench_step --model qwen2.5-0.5b-shape     # target 7, on a GPU machine

In one process, on the same model (its weights as `model.dtype` loads them), data, batch (2 prompts x 8
completions an optimizer step, in the recipe's micro-batches) and completion length:
  floor  one sampled `generate` of the batch's completions + one forward/backward over the same
         tokens + an AdamW step, timed directly;
  ours   GRPOTrainer with this recipe's default config (grpo/default.yaml + hardware detection),
         with a breakdown: generation, reward, log-prob passes, backward, optimizer, the rest;
  trl    GRPOTrainer with TRL's own GRPOConfig defaults (gradient checkpointing, bf16, ...; fp32 on a CPU
         without native bf16, where bf16 is emulated).
Reports medians over the steps after the first (warm-up), completion tokens trained per second,
and per recipe: generation tokens/s, training tokens/s, model FLOPs utilisation (given the device's
peak, known for common GPUs) and peak GPU memory; and the process's peak RSS (the full default
run's figure comes from `/usr/bin/time -v python train_grpo.py`).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
import yaml
from transformers import TrainerCallback

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


class StepClock(TrainerCallback):
    """Wall time of each training step, and each step's train log."""

    def __init__(self):
        self.step_times: list[float] = []
        self.logs: list[dict] = []

    def on_step_begin(self, args, state, control, **kw):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.step_times.append(time.perf_counter() - self.start)

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "completions/mean_length" in logs:
            self.logs.append(dict(logs))


def run_trainer(
    model, tokenizer, train, reward_funcs, kwargs, steps: int, timings: Timings | None, recipe: bool = False
):
    """recipe: with this package's fast paths (grpo_recipes.train.fast_paths), as train_grpo.py builds it."""
    from trl import GRPOConfig, GRPOTrainer

    from grpo_recipes.config.trainer_args import RecipeGRPOConfig
    from grpo_recipes.models import bf16_adamw
    from grpo_recipes.train import fast_paths
    from grpo_recipes.train.sampling_kl import trainer_class

    clock = StepClock()

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()

    with tempfile.TemporaryDirectory() as out:
        args = (RecipeGRPOConfig if recipe else GRPOConfig)(
            output_dir=out,
            max_steps=steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            **kwargs,
        )
        trainer = (trainer_class(args) if recipe else GRPOTrainer)(  # the recipe's, as train_grpo.py does
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train,
            processing_class=tokenizer,
            callbacks=[clock],
        )
        if recipe:  # as train/trainer.py's build_trainer does
            print("fast paths:", fast_paths.apply(trainer))
            print("optimizer:", bf16_adamw.install(trainer) or "transformers' AdamW")
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
    peak_gpu = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else float("nan")
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    tokens = [log["completions/mean_length"] * per_step for log in clock.logs]
    seen = [0.0] + [float(log["num_tokens"]) for log in clock.logs]  # cumulative prompt + completion tokens
    return Run(clock.step_times, tokens, [b - a for a, b in itertools.pairwise(seen)], peak_gpu)


@dataclass
class Run:
    """Per step: wall time, completion tokens, all tokens through the model (prompt + completion)."""

    step_times: list[float]
    completion_tokens: list[float]
    input_tokens: list[float]
    peak_gpu_gib: float

    def rate(self) -> float:  # completion tokens trained per second, after the warm-up step
        return sum(self.completion_tokens[1:]) / sum(self.step_times[1:])


def reset(model, state) -> None:
    """The starting weights, and the class's own forward/generate: each trainer patches the instance."""
    model.load_state_dict(state)
    for name in ("generate", "_original_forward"):
        model.__dict__.pop(name, None)
    for module in model.modules():  # the head's forward, and compiled decoder layers' (grpo.compile_layers)
        module.__dict__.pop("forward", None)


def floor_step(model, tokenizer, rows, completion_length: int, num_generations: int, steps: int, bf16: bool):
    """One generate + one forward/backward + AdamW step over the same sizes, timed directly, in the
    same precision as the recipe (bf16 autocast when it uses bf16)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    times, tokens = [], []
    per_step = 2
    for step in range(steps):
        batch = rows[step * per_step : (step + 1) * per_step]
        texts = [
            tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
            for r in batch
            for _ in range(num_generations)
        ]
        enc = tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        )
        enc = {k: v.to(model.device) for k, v in enc.items()}
        start = time.perf_counter()
        model.eval()
        with torch.no_grad(), torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model.generate(
                **enc,
                max_new_tokens=completion_length,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=tokenizer.pad_token_id,
            )
        model.train()
        mask = (out != tokenizer.pad_token_id).long()
        mask[:, : enc["input_ids"].shape[1]] = enc["attention_mask"]
        with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=out, attention_mask=mask).logits[:, enc["input_ids"].shape[1] - 1 : -1]
        logps = torch.log_softmax(logits.float(), -1).gather(-1, out[:, enc["input_ids"].shape[1] :, None])
        loss = -logps.mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        tokens.append(int(mask[:, enc["input_ids"].shape[1] :].sum()))
    return times[1:], tokens[1:]


# Dense bf16 tensor-core peak per GPU (vendor datasheets, without sparsity), for MFU.
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 125.0}


def peak_tflops(given: float | None) -> float | None:
    if given or not torch.cuda.is_available():
        return given
    name = torch.cuda.get_device_name(0)
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--trl-steps", type=int, default=3)
    parser.add_argument(
        "--model",
        choices=["embedded", "qwen2.5-0.5b-shape"],
        default="embedded",
        help="qwen2.5-0.5b-shape: random weights in Qwen2.5-0.5B's shape (target 7)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's peak for MFU (default: known GPUs by name; none on a CPU)",
    )
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="GRPOConfig overrides for our recipe, to try a variant (e.g. bf16=false)",
    )
    parser.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16"], help="model.dtype")
    parser.add_argument("--skip-trl", action="store_true", help="leave out the plain-TRL comparison")
    args = parser.parse_args()

    from benchmarks.common import qwen25_05b_shaped_model
    from grpo_recipes.config.trainer_args import build_grpo_kwargs
    from grpo_recipes.models.hardware import detect_hardware, resolve_activation_checkpointing
    from rewards import RewardContext, build_rewards

    cfg, taskset, train, _, model, tokenizer = default_setup(eval_size=8, dtype=args.dtype)
    hw = detect_hardware()
    dtype = model.dtype  # as the recipe loads a full fine-tune's weights (hardware.weights_dtype)
    if args.model != "embedded":
        model = qwen25_05b_shaped_model(dtype)
    if hw.gpu:
        model = model.to("cuda", dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    funcs, weights = build_rewards(cfg["dataset"]["rewards"], RewardContext(taskset.score, "answer_tag"))
    ours = build_grpo_kwargs(cfg, hw, reward_weights=weights)
    resolve_activation_checkpointing(ours, model, hw, lora=False)
    for key in (
        "max_steps",
        "output_dir",
        "report_to",
        "logging_steps",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "run_name",
    ):
        ours.pop(key, None)
    for item in args.set:
        key, value = item.split("=", 1)
        ours[key] = yaml.safe_load(value)
    keys = "per_device_train_batch_size gradient_accumulation_steps num_generations max_completion_length"
    batch = {k: ours[k] for k in keys.split()}  # plain TRL's too: the same completions and micro-batches
    completions = batch["per_device_train_batch_size"] * batch["gradient_accumulation_steps"]
    print(f"machine: {machine()}; commit {git_rev()}")
    print(
        f"model: {args.model} ({n_params / 1e6:.0f} M parameters, {str(model.dtype).replace('torch.', '')} "
        "weights)"
    )
    print(
        f"our recipe on this hardware: {'bf16 autocast' if ours.get('bf16') else 'fp32'}, activation "
        "checkpointing "
        f"{'on' if ours.get('activation_checkpointing') else 'off'}"
    )
    print(
        f"batch: {completions // batch['num_generations']} prompts x {batch['num_generations']} completions "
        f"({batch['gradient_accumulation_steps']} micro-batches), "
        f"max {batch['max_completion_length']} tokens; medians after 1 warm-up step"
    )

    base_state = copy.deepcopy(model.state_dict())
    rows = list(train)
    f_times, f_tokens = floor_step(
        model,
        tokenizer,
        rows,
        batch["max_completion_length"],
        batch["num_generations"],
        args.steps,
        bf16=bool(ours.get("bf16")),
    )
    floor = statistics.median(f_times)

    reset(model, base_state)
    timings = Timings()
    o_run = run_trainer(model, tokenizer, train, funcs, ours, args.steps, timings, recipe=True)
    step = statistics.median(o_run.step_times[1:])

    t_run, t_timings = None, Timings()
    if not args.skip_trl:
        reset(model, base_state)
        plain = dict(batch, use_cpu=not hw.gpu)  # TRL's own defaults for everything else
        if not hw.gpu and not hw.bf16:  # bf16 here is emulated (~50x slower): fp32, as a user would set it
            plain["bf16"] = False
            print("plain TRL: bf16=false (this CPU has no native bf16)")
        t_run = run_trainer(model, tokenizer, train, funcs, plain, args.trl_steps, t_timings)

    print(
        f"\nfloor (generate + forward/backward + AdamW, same precision): {floor:6.2f} s/step, "
        f"{sum(f_tokens) / sum(f_times):6.1f} completion tokens/s"
    )
    print(
        f"ours (default recipe):                     {step:6.2f} s/step, {o_run.rate():6.1f} completion "
        "tokens/s"
    )
    if t_run is not None:
        print(
            f"plain TRL defaults:                        {statistics.median(t_run.step_times[1:]):6.2f} "
            "s/step, "
            f"{t_run.rate():6.1f} completion tokens/s"
        )
    print(f"\n1. step overhead, ours / floor:            {step / floor:5.2f}   (target <= 1.15)")
    if t_run is not None:
        print(
            f"2. tokens/s, ours / plain TRL defaults:    {o_run.rate() / t_run.rate():5.2f}   (target >= 2.5)"
        )
    n = len(timings.parts["generation"]) or 1
    print("\nbreakdown of our step (mean over all steps, warm-up included):")
    accounted = 0.0
    for label in ("generation", "reward", "log-prob passes (forward)", "backward", "optimizer"):
        per_step = sum(timings.parts[label]) / n
        accounted += per_step
        print(f"  {label:28s} {per_step:6.2f} s")
    mean_step = sum(o_run.step_times) / len(
        o_run.step_times
    )  # the breakdown covers every step, warm-up included
    print(f"  {'the rest (data, logging, ...)':28s} {max(0.0, mean_step - accounted):6.2f} s")

    peak = peak_tflops(args.peak_tflops)
    print("\n7. per recipe, after the warm-up step" + (f" (MFU against {peak} TFLOPS)" if peak else ""))
    for name, run, t in (("ours", o_run, timings), ("plain TRL", t_run, t_timings)):
        if run is None:
            continue
        gen = t.parts["generation"][1:]
        gen_rate = sum(run.completion_tokens[1:]) / sum(gen) if gen else float("nan")
        # Model FLOPs of a step: 2 N a token to generate it (prefill + decode) and 6 N to train on it
        # (recomputation and attention not counted), over every prompt and completion token.
        flops = 8 * n_params * sum(run.input_tokens[1:])
        mfu = f", MFU {100 * flops / sum(run.step_times[1:]) / (peak * 1e12):.1f} %" if peak else ""
        print(
            f"  {name:10s} generation {gen_rate:8.1f} tokens/s, training {run.rate():8.1f} completion "
            "tokens/s"
            f"{mfu}, peak GPU memory {run.peak_gpu_gib:.2f} GiB"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    print(f"\npeak RSS of this benchmark process (three trainers in turn): {rss:.2f} GiB")


if __name__ == "__main__":
    main()
