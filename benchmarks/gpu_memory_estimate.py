"""Where the batch sizes and vLLM memory shares of config/model/<GPU preset>.yaml come from: an estimate
of one 80 GB GPU's memory for GRPO (no GPU was available to measure them): a full fine-tune where one
fits, else LoRA.

    python -m benchmarks.gpu_memory_estimate            # every preset, the table quoted in the YAML files

Model shapes are those of each model's config.json on the hub (hidden size, layers, MLP width, KV
heads, vocabulary). The arithmetic, per GPU, with the dtypes a run loads by default
(grpo_recipes/models/hardware.py, `weights_dtype`; `model.dtype=bf16` halves the first figure below, trained
by the stochastically rounding AdamW of grpo_recipes/models/bf16_adamw.py):
  - a full fine-tune: fp32 weights, gradients, AdamW m and v, 4 + 4 + 4 + 4 = 16 bytes per parameter,
    and autocast's bf16 copy of the weights while a pass runs, 2 more (beta > 0 adds a reference
    model in the policy's fp32, 4 more: a bf16 one would start 8e-3 nats a token of KL away from the
    policy); LoRA: the checkpoint's bf16 weights (2 bytes), and 18 bytes per adapter parameter;
  - activations kept for the backward pass, no activation checkpointing: per token and layer about
    (8 x 4 h + 8 i) bytes with a full fine-tune's fp32 residual stream (its norm inputs and outputs,
    autocast's bf16 copies of the q/k/v, o and gate/up inputs, gate/up/act/down in bf16), (8 x 2 h +
    8 i) with LoRA's bf16 one; flash/sdpa attention keeps no seq x seq matrix;
  - the logits of the completion tokens: V x (2 bytes bf16 + 4 bytes fp32 log-softmax) per token;
  - vLLM colocated (`use_vllm=true`, grpo.vllm_mode=colocate): its share of the GPU holds a second
    bf16 copy of the weights, the KV cache of one generation batch, and ~2 GB of CUDA graphs.
One micro-batch is grpo.per_device_train_batch_size completions of SEQ tokens (prompt + completion).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

GPU_GB = 80
PROMPT, COMPLETION = 256, 768  # tokens: a GSM8K-style prompt with its system prompt, and room to reason
SEQ = PROMPT + COMPLETION


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    mlp: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    def params(self) -> int:
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        per_layer = attn + 3 * self.hidden * self.mlp + 2 * self.hidden
        return self.layers * per_layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


# config.json of each hub model (preset file: its shape)
SHAPES = {
    "qwen2_5_0_5b": Shape(24, 896, 4864, 14, 2, 64, 151936, True),
    "qwen2_5_1_5b": Shape(28, 1536, 8960, 12, 2, 128, 151936, True),
    "qwen2_5_3b": Shape(36, 2048, 11008, 16, 2, 128, 151936, True),
    "qwen3_0_6b": Shape(28, 1024, 3072, 16, 8, 128, 151936, True),
    "qwen3_1_7b": Shape(28, 2048, 6144, 16, 8, 128, 151936, True),
    "llama3_2_1b": Shape(16, 2048, 8192, 32, 8, 64, 128256, True),
    "smollm2_360m": Shape(32, 960, 2560, 15, 5, 64, 49152, True),
    "smollm2_1_7b": Shape(24, 2048, 8192, 32, 32, 64, 49152, True),
}
GB = 1e9
BUDGET_GB = 0.9 * GPU_GB  # a tenth kept free: allocator fragmentation, CUDA context, NCCL buffers
BATCHES = (8, 16, 32, 64)  # completions per device micro-batch: multiples of num_generations (8)
LORA_R = 16  # model.lora.r's default


def lora_params(shape: Shape, r: int = LORA_R) -> int:
    """LoRA's A and B of rank r on q, k, v, o, gate, up and down: r x (inputs + outputs) each."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    h, i = shape.hidden, shape.mlp
    return shape.layers * r * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))


def estimate(
    shape: Shape, batch: int, share: float, checkpointing: bool = False, lora: bool = False
) -> dict[str, float]:
    n = shape.params()
    if lora:  # the checkpoint's bf16 base, frozen; fp32 adapters with their gradients and AdamW
        states, residual = (2 * n + 18 * lora_params(shape)) / GB, 2
    else:
        states, residual = 18 * n / GB, 4
    per_layer = 8 * residual * shape.hidden + 8 * shape.mlp  # bytes per token kept by one layer
    if checkpointing:  # each layer keeps its input; one layer at a time is recomputed whole
        acts = batch * SEQ * (shape.layers * residual * shape.hidden + per_layer) / GB
    else:
        acts = batch * SEQ * shape.layers * per_layer / GB
    logits = batch * COMPLETION * shape.vocab * 6 / GB
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2  # K and V, bf16
    vllm_needed = (2 * n + batch * SEQ * kv_per_token) / GB + 2
    return {
        "params_b": n / 1e9,
        "states_gb": states,
        "activations_gb": acts,
        "logits_gb": logits,
        "train_gb": states + acts + logits,
        "vllm_gb": share * GPU_GB,
        "vllm_needed_gb": vllm_needed,
        "total_gb": states + acts + logits + share * GPU_GB,
    }


def choose(shape: Shape) -> tuple[int, float, bool, bool]:
    """(batch, vLLM share, checkpointing, LoRA). The batch: the largest of BATCHES whose total fits
    BUDGET_GB, a full fine-tune before LoRA, and without activation checkpointing (faster) before with it;
    vLLM's share: what that batch needs with a quarter to spare, rounded up to 0.05 (at least 0.1)."""
    for lora in (False, True):
        for checkpointing in (False, True):
            for batch in sorted(BATCHES, reverse=True):
                needed = estimate(shape, batch, 0.0)["vllm_needed_gb"]  # weights + this batch's KV cache
                share = round(max(0.1, math.ceil(needed * 1.25 / GPU_GB / 0.05) * 0.05), 2)
                if estimate(shape, batch, share, checkpointing, lora)["total_gb"] <= BUDGET_GB:
                    return batch, share, checkpointing, lora
    raise ValueError(f"{shape} does not fit one {GPU_GB} GB GPU, even with LoRA")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print(f"sequence {PROMPT} + {COMPLETION} tokens, one {GPU_GB} GB GPU")
    print(
        "| preset | params | trains | batch | checkpointing | weights, grads, Adam | activations | logits "
        "| vLLM | total |"
    )
    print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for name, shape in SHAPES.items():
        batch, share, checkpointing, lora = choose(shape)
        e = estimate(shape, batch, share, checkpointing, lora)
        print(
            f"| {name} | {e['params_b']:.2f} B | {f'LoRA r={LORA_R}' if lora else 'all (fp32)'} | {batch} "
            f"| {'on' if checkpointing else 'off'} | {e['states_gb']:.1f} GB | {e['activations_gb']:.1f} GB "
            f"| {e['logits_gb']:.1f} GB | {share} = {e['vllm_gb']:.0f} GB (needs {e['vllm_needed_gb']:.1f}) "
            f"| {e['total_gb']:.0f} GB |"
        )


if __name__ == "__main__":
    main()
