"""From the composed Hydra config (a plain dict) to GRPOConfig keyword arguments.

- The `grpo` group holds GRPOConfig fields; every field is reachable, an unknown key is an
  error naming the key (field names change between TRL versions).
- Common knobs live at the top level (`max_steps=100`) and are copied in here.
- Hardware is detected: GPU -> bf16 where supported; CPU -> use_cpu, with bf16 autocast where
  the CPU computes bf16 natively (AMX / AVX-512-BF16: about 1.5-2x faster steps on the
  embedded model, same eval numbers, see benchmarks/RESULTS.md), fp32 otherwise. Weights stay
  fp32 either way. Activation checkpointing, unless set, is on only where memory needs it
  (`resolve_activation_checkpointing`, once the model is loaded). A setting that cannot work on
  this hardware is an error.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

from grpo_recipes.errors import ConfigError

# Top-level knobs that are GRPOConfig fields: `python train_grpo.py max_steps=100`.
COMMON_KNOBS = ("max_steps", "learning_rate", "seed", "run_name", "output_dir", "report_to")
SWITCHES = ("use_vllm",)


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
        limit = open("/sys/fs/cgroup/memory.max").read().strip()  # cgroup v2; "max" when unlimited
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


def resolve_activation_checkpointing(grpo: dict[str, Any], model, hw: Hardware, lora: bool,
                                     memory_bytes: int | None = None) -> bool:
    """`activation_checkpointing: null` -> on only where memory needs it: when the training state
    (weights + gradients + two AdamW moments, in the weights' dtype; weights alone under LoRA) is
    over a quarter of the device's memory, the rest being activations, the runtime and the OS.
    The embedded model's state is 2.2 GB (fp32), so it checkpoints on a machine under 8.6 GB:
    there it lowers the peak from 4.8 to 3.4 GB for ~15% more time (benchmarks/RESULTS.md, 6)."""
    if grpo.get("activation_checkpointing") is None and grpo.get("gradient_checkpointing") is not None:
        grpo["activation_checkpointing"] = grpo["gradient_checkpointing"]  # the older name, set explicitly
    if grpo.get("activation_checkpointing") is None:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        state = weights if lora else 4 * weights
        memory = device_memory_bytes(hw) if memory_bytes is None else memory_bytes
        grpo["activation_checkpointing"] = state > memory / 4
    return bool(grpo["activation_checkpointing"])


def grpo_field_names() -> set[str]:
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


def build_grpo_kwargs(cfg: dict[str, Any], hw: Hardware, reward_weights: list[float] | None = None) -> dict[str, Any]:
    grpo = dict(cfg.get("grpo") or {})
    for knob in COMMON_KNOBS:
        if knob in grpo:
            raise ConfigError(f"grpo.{knob} is a top-level knob here: set `{knob}=...` instead of `grpo.{knob}=...`")
        grpo[knob] = cfg[knob]
    fields = grpo_field_names()
    for key in grpo:
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(f"grpo.{key}: not a GRPOConfig field of the installed TRL.{hint}")
    # Switches that may be turned on at the top level (`use_vllm=true`) or inside a grpo preset.
    for switch in SWITCHES:
        grpo[switch] = bool(cfg.get(switch)) or bool(grpo.get(switch))
    if isinstance(grpo.get("report_to"), str):
        grpo["report_to"] = [grpo["report_to"]]

    _apply_hardware(grpo, hw)
    _check_batch(grpo, hw)
    if reward_weights is not None:
        if grpo.get("reward_weights") is not None:
            raise ConfigError("grpo.reward_weights: set each reward's weight under dataset.rewards.<name>.weight")
        grpo["reward_weights"] = reward_weights
    return grpo


def _apply_hardware(grpo: dict[str, Any], hw: Hardware) -> None:
    if grpo.get("use_vllm"):
        if not hw.gpu:
            raise ConfigError("use_vllm=true needs a CUDA GPU and none was found; drop it to generate with transformers")
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("use_vllm=true but vllm is not installed: pip install -e '.[vllm]'")
    if hw.gpu:
        if grpo.get("bf16") is None:
            grpo["bf16"] = hw.bf16 and not grpo.get("fp16")
        if grpo.get("use_cpu"):
            grpo["bf16"] = False
    else:
        if grpo.get("fp16"):
            raise ConfigError("grpo.fp16=true needs a GPU; on a CPU-only machine leave it false "
                              "(bf16 autocast is used where the CPU has native bf16, fp32 otherwise)")
        grpo["use_cpu"] = True
        if grpo.get("bf16") is None:
            grpo["bf16"] = hw.bf16


def _check_batch(grpo: dict[str, Any], hw: Hardware) -> None:
    """TRL counts completions, not prompts: each generation batch must hold whole groups."""
    per_device = int(grpo.get("per_device_train_batch_size", 8))
    num_generations = int(grpo.get("num_generations") or 8)
    if grpo.get("generation_batch_size") is not None:
        batch, where = int(grpo["generation_batch_size"]), "grpo.generation_batch_size"
    else:
        steps = int(grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps", 1))
        batch = per_device * hw.world_size * steps
        where = (f"grpo.per_device_train_batch_size ({per_device}) x processes ({hw.world_size}) x "
                 f"steps_per_generation ({steps})")
    if num_generations < 2:
        raise ConfigError(f"grpo.num_generations={num_generations}: GRPO needs at least 2 completions per prompt")
    if batch % num_generations:
        raise ConfigError(
            f"{where} = {batch} completions per generation batch is not divisible by grpo.num_generations "
            f"({num_generations}); TRL counts completions, not prompts. Use a multiple of {num_generations}."
        )
