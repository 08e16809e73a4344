"""The hardware a run trains on, and the decisions that follow from it: precision and memory.

- GPU: bf16 where the GPU supports it. CPU: bf16 autocast where the CPU computes bf16 natively
  (AMX / AVX-512-BF16; faster steps, same eval numbers: benchmarks/RESULTS.md), fp32 otherwise.
  Weights stay fp32 on a CPU either way.
- Activation checkpointing, unless set, is on only where memory needs it
  (`resolve_activation_checkpointing`, once the model is loaded).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from grpo_common.errors import ConfigError


@dataclass(frozen=True)
class Hardware:
    gpu: bool
    bf16: bool  # the device that trains computes bf16 natively
    world_size: int

    @property
    def name(self) -> str:
        return "cuda" if self.gpu else "cpu"


def cpu_has_native_bf16() -> bool:
    """AMX or AVX-512-BF16 (Linux /proc/cpuinfo); elsewhere assume not."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"amx_bf16", "avx512_bf16"} & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return False


def detect_hardware() -> Hardware:
    import torch

    gpu = torch.cuda.is_available()
    bf16 = torch.cuda.is_bf16_supported() if gpu else cpu_has_native_bf16()
    return Hardware(gpu=gpu, bf16=bf16, world_size=int(os.environ.get("WORLD_SIZE", "1")))


def host_memory_bytes() -> int:
    """This process's share of the host's RAM (or of the container's cgroup limit, if lower), split
    between the training processes on this host."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:  # cgroup v2; "max" when unlimited
            limit = f.read().strip()
        memory = min(memory, int(limit)) if limit.isdigit() else memory
    except OSError:
        pass
    return memory // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def device_memory_bytes(hw: Hardware) -> int:
    """Memory one training process can count on: its GPU's, or its share of the host's for a CPU run."""
    if hw.gpu:
        import torch

        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return host_memory_bytes()


def resolve_activation_checkpointing(
    grpo: dict[str, Any], model, hw: Hardware, lora: bool, memory_bytes: int | None = None
) -> bool:
    """`activation_checkpointing: null` -> on only where memory needs it: when the training state
    (weights + gradients + two AdamW moments, in the weights' dtype; weights alone under LoRA) is
    over a quarter of the device's memory, the rest being activations, the runtime and the OS
    (the trade-off measured: benchmarks/RESULTS.md, target 6). Sets the key in `grpo` (GRPOConfig
    keyword arguments) and returns it."""
    if grpo.get("activation_checkpointing") is None and grpo.get("gradient_checkpointing") is not None:
        grpo["activation_checkpointing"] = grpo["gradient_checkpointing"]  # the older name, set explicitly
    if grpo.get("activation_checkpointing") is None:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        state = weights if lora else 4 * weights
        memory = device_memory_bytes(hw) if memory_bytes is None else memory_bytes
        grpo["activation_checkpointing"] = state > memory / 4
    return bool(grpo["activation_checkpointing"])


def apply_hardware(grpo: dict[str, Any], hw: Hardware) -> None:
    """Precision and device for GRPOConfig keyword arguments; a setting this hardware cannot run is an
    error."""
    if grpo.get("use_vllm"):
        if not hw.gpu:
            raise ConfigError(
                "use_vllm=true needs a CUDA GPU and none was found; drop it to generate with transformers"
            )
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("use_vllm=true but vllm is not installed: pip install -e '.[vllm]'")
    if hw.gpu:
        if grpo.get("bf16") is None:
            grpo["bf16"] = hw.bf16 and not grpo.get("fp16")
        if grpo.get("use_cpu"):
            grpo["bf16"] = False
    else:
        if grpo.get("fp16"):
            raise ConfigError(
                "grpo.fp16=true needs a GPU; on a CPU-only machine leave it false "
                "(bf16 autocast is used where the CPU has native bf16, fp32 otherwise)"
            )
        grpo["use_cpu"] = True
        if grpo.get("bf16") is None:
            grpo["bf16"] = hw.bf16
