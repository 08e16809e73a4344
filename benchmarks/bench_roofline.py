"""The default training step against this machine's limit: per phase, the roofline bound and the time it
takes.

    python -m benchmarks.bench_roofline [--steps 10] [--set max_completion_length=64 ...] [--dtype fp32]

1. The machine's peaks, measured here: matrix-multiply FLOP/s in the dtype the step computes in (bf16 under
   autocast or on bf16 weights, else fp32: a CPU without native bf16, where bf16 GEMMs crawl at ~1 GFLOP/s)
   at the model's own shapes (the best of a few row counts) and read bandwidth (the faster of summing a 1 GiB
   fp32 tensor and a matrix-vector product over it); on a GPU the same on the GPU. Measured before the steps
   and again after them, the bound takes the higher of each: on a shared VM the same GEMMs once measured
   0.65 TFLOP/s before the steps and 2.3 after, and a ~7x step read as 3.6x. A slow minute must not pass
   for the limit.
2. The step's bound from its real shapes (completions, mean prompt and completion tokens, the model's
   layers, a reference model when beta > 0, updates per generation): for each phase the larger of its FLOPs
   at the GEMM peak and its bytes at the read bandwidth. Prefill: each distinct prompt (GRPO repeats each
   one num_generations times) through the body, its last token aside, where the recipe prefills so (else
   every row's prompt and one LM-head row each). Decode: each decoding pass counted (the prompts' last token
   after that prefill, then each generated token but the last) at the rows it computes (a row that has
   ended is no work), reading every weight and those rows' KV cache in the compute dtype.
   Training forward: every token through the body (each distinct prompt once, its last token aside, where
   the recipe's passes share prompts so; completions at their mean length: padding is no work), the LM
   head on completion tokens only; backward: twice its FLOPs.
   Optimizer: AdamW reading the weights, gradients and two moments (16 bytes a parameter for fp32
   weights; 8 for bf16 ones and BF16AdamW, model.dtype's default on a CPU with native bf16); its writes go
   back to the lines it just read and ride along (measured here: a fused AdamW step moves 28 bytes a
   parameter at ~44 GB/s, an in-place add reads and writes at ~38 GB/s, while no read-only kernel passes ~29
   GB/s): counted at the read bandwidth they made a "bound" AdamW beat (0.7x).
3. The recipe's step (grpo/default.yaml, its trainer class and fast paths, as train_grpo.py builds it),
   timed per phase by
   hooks: the decoder body's prefill of the distinct prompts (or, without it, the model's first forward
   inside `generate`), the model's forwards inside `generate` (decode), the rest of
   `generate` (sampling, the loop), the forwards with gradients (training forward), `backward`, the
   optimizer step, and the rest (rewards, data, logging). Medians over steps 3 onward.
Prints phase | bound | measured | ratio, and the whole step's ratio: median step / summed bound; then each
phase's peak RSS (PhaseMemory: generation, training forward, backward, optimizer, the rest), the highest over
the steps measured.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
import yaml
from transformers import TrainerCallback

from benchmarks.bench_step import StepClock
from benchmarks.common import default_setup, git_rev, machine


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_seconds(fn, device, repeat: int = 7) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine_peaks(config, device, dtype) -> tuple[float, float]:
    """(GEMM FLOP/s in `dtype` at the model's shapes, read bytes/s)."""
    d, ff = config.hidden_size, config.intermediate_size
    best = 0.0
    for m in (512, 1024, 4096):
        for k, n in ((d, ff), (ff, d), (d, config.vocab_size)):
            a = torch.randn(m, k, dtype=dtype, device=device)
            b = torch.randn(k, n, dtype=dtype, device=device)
            best = max(best, 2 * m * k * n / best_seconds(lambda a=a, b=b: a @ b, device))
    x = torch.ones(
        2**16, 2**12, device=device
    )  # 1 GiB of fp32: the best of a sum and a matrix-vector product
    v = torch.ones(2**12, 1, device=device)
    seconds = min(best_seconds(lambda: x.sum(), device), best_seconds(lambda: x @ v, device))
    return best, x.numel() * x.element_size() / seconds


def printed_peaks(config, device, dtype, when: str) -> tuple[float, float]:
    """machine_peaks, printed (the run measures them twice: before its steps and after)."""
    gemm, reads = machine_peaks(config, device, dtype)
    name = str(dtype).removeprefix("torch.")
    print(
        f"measured peaks {when}: {name} GEMM {gemm / 1e12:.2f} TFLOP/s (model shapes), "
        f"reads {reads / 1e9:.1f} GB/s"
    )
    return gemm, reads


def step_bounds(
    config,
    n_params: int,
    shapes: dict,
    peak: float,
    bandwidth: float,
    weight_bytes: int = 4,
    compute_bytes: int = 2,
) -> dict[str, float]:
    """Seconds per phase at the machine's limit (shapes: completions B of distinct prompts U, prompt
    tokens P, completion tokens C (their mean: a row's padding is no work), the rows of each decode pass
    (decode_rows, one list a step, whose median step's bound is taken, as the time's median is: a row that
    has ended is no work either; None where not seen: B), and passes: model passes over the batch with
    gradients or for old/reference log-probs; weight_bytes: 4 for fp32 weights, gradients and AdamW moments,
    2 for bf16 ones; compute_bytes: a weight's and a cached key's as generation reads them, 2 under bf16
    autocast, 4 in fp32)."""
    B, U, P, C = (shapes[k] for k in ("completions", "prompts", "prompt_tokens", "completion_tokens"))
    steps = [[n or B for n in rows] for rows in shapes["decode_rows"]] or [[]]
    d, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    head = d * vocab  # the LM head's weights (tied to the embedding in SmolLM2)
    body = n_params - head * (1 if config.tie_word_embeddings else 2)
    kv_dim = config.num_key_value_heads * (d // config.num_attention_heads)

    def attention(queries: float, context: float) -> float:  # QK^T and AV: 2 matmuls of 2 FLOPs a MAC
        return 4 * layers * d * queries * context

    def bound(flops: float, bytes_: float) -> float:
        return max(flops / peak, bytes_ / bandwidth)

    if shapes["prefilled"]:  # the recipe's: each distinct prompt through the body, its last token decoded
        prefill = bound(2 * body * U * (P - 1) + attention(U * (P - 1), P / 2), compute_bytes * n_params)
    else:  # every row's prompt through the model, one LM-head row each
        prefill = bound(2 * body * B * P + 2 * head * B + attention(B * P, P / 2), compute_bytes * n_params)
    decode = statistics.median(  # pass t of n rows reads every weight and their KV cache of P + t positions
        sum(
            bound(
                2 * (body + head) * n + attention(n, P + t),
                compute_bytes * (n_params + 2 * layers * kv_dim * n * (P + t)),
            )
            for t, n in enumerate(rows)
        )
        for rows in steps
    )
    passes = round(statistics.median(len(rows) for rows in steps))
    if shapes["shared_prompts"]:  # the recipe's: each distinct prompt once, then every row's last prompt
        rows = U * (P - 1) + B * C  # token and completion but its last token (which predicts nothing)
        attend = attention(U * (P - 1), P / 2) + attention(B * C, P + C / 2)
    else:
        rows, attend = B * (P + C), attention(B * (P + C), (P + C) / 2)
    forward_flops = 2 * body * rows + 2 * head * B * C + attend
    return {
        "prefill": prefill,
        f"decode ({passes} passes)": decode,
        "sampling and the generate loop": 0.0,
        "training forward": shapes["passes"] * bound(forward_flops, 4 * n_params),
        "backward": bound(2 * forward_flops, 8 * n_params),
        # reads p, g, m, v; writes p, m, v in place
        "optimizer (AdamW)": bound(0, 4 * weight_bytes * n_params),
        "the rest (rewards, data, logging)": 0.0,
    }


class PhaseMemory:
    """The peak resident memory of each phase of a step: VmHWM (/proc/self/status), reset at each phase's
    start through /proc/self/clear_refs (Linux); off where either is missing. What the process peaked at
    overall (ru_maxrss) also counts the peak measurements' 1 GiB tensor."""

    def __init__(self):
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.on = self.hwm() is not None
        except OSError:
            self.on = False
        self.phase, self.step = None, {}

    @staticmethod
    def hwm() -> float | None:
        match = re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text())
        return int(match.group(1)) / 2**20 if match else None  # GiB

    def enter(self, phase: str) -> None:
        """The phase that starts now; the one before it ends."""
        if not self.on:
            return
        if self.phase is not None:
            self.step[self.phase] = max(self.step.get(self.phase, 0.0), self.hwm())
        Path("/proc/self/clear_refs").write_text("5")
        self.phase = phase

    def take(self) -> dict[str, float]:
        """This step's peak per phase (GiB), and a fresh step (in "the rest" until a phase starts)."""
        self.enter("the rest")
        step, self.step = self.step, {}
        return step


class PhaseClock:
    """Times the model's forwards by phase (hooks: whatever wraps `forward`, the hooks see every call) and
    what `generate` spends outside them. The recipe prefills each distinct prompt through the decoder body
    alone (train/fast_generation.py): a body pass inside `generate` but outside a model pass is the prefill,
    and every model pass of that `generate` a decoding pass."""

    def __init__(self, model, device, memory: PhaseMemory):
        self.device, self.parts, self.in_generate, self.calls = device, defaultdict(float), False, 0
        self.memory = memory
        self.prefilled = self.ever_prefilled = self.in_model = self.shared_prompts = False
        self.body_calls, self.pass_rows, self.decode_rows = 0, None, []  # rows of this step's decoding passes
        model.register_forward_pre_hook(self.before)
        model.register_forward_hook(self.after)
        body = model.get_decoder()
        body.register_forward_pre_hook(self.before_body)
        body.register_forward_hook(self.after_body)

    def before(self, module, args):
        sync(self.device)
        self.start, self.in_model, self.body_calls, self.pass_rows = time.perf_counter(), True, 0, None
        if not self.in_generate:
            self.memory.enter("training forward")

    def after(self, module, args, output):
        sync(self.device)
        seconds = time.perf_counter() - self.start
        self.in_model = False
        if self.in_generate:
            prefill = self.calls == 0 and not self.prefilled
            self.parts["prefill" if prefill else "decode"] += seconds
            self.parts["decode passes"] += not prefill
            if not prefill:
                self.decode_rows.append(self.pass_rows)
            self.calls += 1
        else:
            self.parts["training forward"] += seconds
            self.shared_prompts |= self.body_calls > 1  # the distinct prompts' pass, then the rows'
        self.forward_in_generate = getattr(self, "forward_in_generate", 0.0) + seconds * self.in_generate

    def before_body(self, module, args):
        self.body_calls += 1
        if self.in_generate and not self.in_model:
            sync(self.device)
            self.body_start = time.perf_counter()

    def after_body(self, module, args, output):
        self.pass_rows = output[0].size(0)  # the rows a pass computed (ended rows leave the decoding passes)
        if self.in_generate and not self.in_model:
            sync(self.device)
            seconds = time.perf_counter() - self.body_start
            self.parts["prefill"] += seconds
            self.forward_in_generate += seconds
            self.prefilled = self.ever_prefilled = True

    def wrap_generate(self, model):
        generate = model.generate

        def timed(*args, **kwargs):
            self.in_generate, self.calls, self.forward_in_generate, self.prefilled = True, 0, 0.0, False
            self.memory.enter("generation")
            start = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                sync(self.device)
                self.memory.enter("the rest")
                total = time.perf_counter() - start
                self.parts["sampling and the generate loop"] += total - self.forward_in_generate
                self.in_generate = False

        model.generate = timed

    def timed(self, obj, name: str, label: str):
        original = getattr(obj, name)

        def call(*args, **kwargs):
            sync(self.device)
            start = time.perf_counter()
            self.memory.enter(label)
            try:
                return original(*args, **kwargs)
            finally:
                sync(self.device)
                self.parts[label] += time.perf_counter() - start
                self.memory.enter("the rest")

        setattr(obj, name, call)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="GRPOConfig overrides")
    parser.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16"], help="model.dtype")
    args = parser.parse_args()

    from grpo_recipes.config.trainer_args import RecipeGRPOConfig, build_grpo_kwargs
    from grpo_recipes.models import bf16_adamw
    from grpo_recipes.models.hardware import detect_hardware, malloc_tuning, resolve_activation_checkpointing
    from grpo_recipes.train import fast_paths
    from grpo_recipes.train.sampling_kl import trainer_class
    from rewards import RewardContext, build_rewards

    cfg, taskset, train, _, model, tokenizer = default_setup(eval_size=8, dtype=args.dtype)
    hw = detect_hardware()
    device = torch.device("cuda" if hw.gpu else "cpu")
    model = model.to(device)  # as the recipe loads a full fine-tune's weights (hardware.weights_dtype)
    funcs, weights = build_rewards(cfg["dataset"]["rewards"], RewardContext(taskset.score, "answer_tag"))
    grpo = build_grpo_kwargs(cfg, hw, reward_weights=weights)
    resolve_activation_checkpointing(grpo, model, hw, lora=False)
    for key in ("max_steps", "output_dir", "report_to", "logging_steps", "save_strategy", "run_name"):
        grpo.pop(key, None)
    grpo.update({k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)})

    print(f"machine: {machine()}; commit {git_rev()}; torch threads {torch.get_num_threads()}")
    print(f"allocator: {malloc_tuning()} (GLIBC_TUNABLES= to measure without)")
    # the dtype the step's GEMMs run in: bf16 (fp16) under autocast or on such weights, else fp32
    compute = torch.float16 if grpo.get("fp16") or model.dtype == torch.float16 else torch.float32
    compute = torch.bfloat16 if grpo.get("bf16") or model.dtype == torch.bfloat16 else compute
    peak, bandwidth = printed_peaks(model.config, device, compute, "before the steps")

    import tempfile

    memory = PhaseMemory()
    clock, phases = StepClock(), PhaseClock(model, device, memory)
    with tempfile.TemporaryDirectory() as out:
        config = RecipeGRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            **grpo,
        )
        trainer = trainer_class(config)(  # the recipe's trainer, as train_grpo.py builds it
            model=model,
            reward_funcs=funcs,
            args=config,
            train_dataset=train,
            processing_class=tokenizer,
            callbacks=[clock],
        )
        print("fast paths:", fast_paths.apply(trainer, grpo.get("fast_paths", "auto")))
        print("optimizer:", bf16_adamw.install(trainer) or "transformers' AdamW")
        phases.wrap_generate(trainer.model)
        phases.timed(trainer.accelerator, "backward", "backward")
        per_step: list[dict[str, float]] = []

        class Snapshot(TrainerCallback):  # the optimizer step, and each step's phases
            def on_pre_optimizer_step(self, *a, **kw):
                sync(device)
                self.start = time.perf_counter()
                memory.enter("optimizer")

            def on_optimizer_step(self, *a, **kw):
                sync(device)
                phases.parts["optimizer"] += time.perf_counter() - self.start
                memory.enter("the rest")

            def on_step_end(self, *a, **kw):
                per_step.append(dict(phases.parts, decode_rows=phases.decode_rows, memory=memory.take()))
                phases.parts.clear()
                phases.decode_rows = []

        trainer.add_callback(Snapshot())
        trainer.train()

    # the bound takes the higher of each
    gemm, reads = printed_peaks(model.config, device, compute, "after the steps")
    peak, bandwidth = max(peak, gemm), max(bandwidth, reads)

    skip = min(2, len(per_step) - 1)  # medians from step 3 on: the first steps warm caches (and compile)
    logs = clock.logs[skip:]
    completions = config.per_device_train_batch_size * config.gradient_accumulation_steps
    shapes = {
        "completions": completions,
        "prompts": completions // config.num_generations,
        "prefilled": phases.ever_prefilled,
        "shared_prompts": phases.shared_prompts,
        "prompt_tokens": round(
            statistics.mean(
                (log["num_tokens"] - prev["num_tokens"]) / completions  # a step's tokens, all micro-batches
                - log["completions/mean_length"]
                for prev, log in zip(clock.logs, clock.logs[1:])
            )
        ),
        "completion_tokens": statistics.mean(log["completions/mean_length"] for log in logs),
        "decode_rows": [p["decode_rows"] for p in per_step[skip:]],
        "passes": 1 + (config.beta > 0) + (config.num_iterations > 1),
    }
    n_params = sum(p.numel() for p in model.parameters())
    bounds = step_bounds(
        model.config, n_params, shapes, peak, bandwidth, model.dtype.itemsize, compute.itemsize
    )
    step = statistics.median(clock.step_times[skip:])
    measured = {}
    for name in bounds:
        key = name.split(" (")[0] if name.startswith(("decode", "optimizer")) else name
        values = [parts.get(key, 0.0) for parts in per_step[skip:]]
        measured[name] = statistics.median(values) if values else float("nan")
    measured["the rest (rewards, data, logging)"] = max(0.0, step - sum(measured.values()))
    passes = [len(rows) for rows in shapes["decode_rows"]]
    rows = sum(sum(rows) for rows in shapes["decode_rows"]) / max(1, sum(passes))
    print(
        f"step: {shapes['completions']} completions, ~{shapes['prompt_tokens']} prompt tokens, up to "
        f"{config.max_completion_length} completion tokens (mean {shapes['completion_tokens']:.1f}), "
        f"{statistics.median(passes):.0f} decode passes of {rows:.1f} rows on average, "
        f"{shapes['passes']} model pass(es) before the update"
        f"{' (each distinct prompt once)' if shapes['shared_prompts'] else ''}; "
        f"medians of steps {skip + 1}-{len(per_step)}\n"
    )
    print("| phase | bound (s) | measured (s) | ratio |\n|---|---|---|---|")
    for name, bound in bounds.items():
        ratio = f"{measured[name] / bound:.1f}x" if bound else "-"
        print(f"| {name} | {bound:.3f} | {measured[name]:.3f} | {ratio} |")
    total = sum(bounds.values())
    print(f"| **whole step** | **{total:.3f}** | **{step:.3f}** | **{step / total:.1f}x** |")
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(f"\n{faults / len(per_step):,.0f} minor page faults a step")
    if memory.on:  # each phase's highest peak over the steps measured
        peaks = defaultdict(float)
        for parts in per_step[skip:]:
            for phase, gib in parts["memory"].items():
                peaks[phase] = max(peaks[phase], gib)
        order = ("generation", "training forward", "backward", "optimizer", "the rest")
        said = ", ".join(f"{phase} {peaks[phase]:.2f}" for phase in order if phase in peaks)
        print(f"peak RSS by phase, steps {skip + 1}-{len(per_step)} (GiB): {said}")
    else:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"peak RSS of this process {rss:.2f} GiB (the peak measurements' 1 GiB tensor included)")


if __name__ == "__main__":
    from grpo_recipes.models.hardware import relaunch_with_malloc_tunables

    # the allocator train_grpo.py runs with (torch, imported above, loads again in the new process)
    relaunch_with_malloc_tunables(entry_point=True)
    main()
