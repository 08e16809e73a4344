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
import re
from dataclasses import dataclass
from typing import Any

from grpo_common.errors import ConfigError
from grpo_recipes.checks import check_batch

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
    check_batch(grpo, hw.world_size)
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


def check_trainer_config(cfg: dict[str, Any], hw: Hardware | None = None) -> None:
    """The GRPOConfig this config builds, checked as TRL would: the last stage of the config check."""
    rewards = [r for r in (cfg["dataset"].get("rewards") or {}).values() if r is not None]
    check_grpo_config(build_grpo_kwargs(cfg, hw or detect_hardware(), reward_weights=[1.0] * len(rewards)))


def check_grpo_config(grpo: dict[str, Any]) -> None:
    """Every grpo field against the type TRL declares for it, then TRL's own rules (GRPOConfig's
    __post_init__), each failure as one ConfigError. Builds a throw-away GRPOConfig; nothing is kept."""
    import typing

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    for key, value in grpo.items():
        if key in hints and not _matches(value, hints[key]):
            raise ConfigError(f"grpo.{key}={value!r}: expected {_type_name(hints[key])} (GRPOConfig's type)")
    try:
        GRPOConfig(**{**grpo, "activation_checkpointing": bool(grpo.get("activation_checkpointing"))})
    except (ValueError, TypeError) as err:
        message = str(err).strip().splitlines()[0]
        # TRL's messages name a field or a value; name the key the user set whose value it quotes
        named = [k for k, v in grpo.items() if isinstance(v, str) and len(v) > 1 and v in message]
        named = named or [k for k in grpo if re.search(rf"\b{re.escape(k)}\b", message)]
        where = f"grpo.{named[0]}={grpo[named[0]]}" if named else "grpo"
        raise ConfigError(f"{where}: {message}") from None


def _matches(value: Any, tp: Any) -> bool:
    """Exact typing: an int is a float, a bool is not an int; unknown classes pass (TRL checks them)."""
    import enum
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple) or tp in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(_matches(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value in {e.value for e in tp}
    return True


def _type_name(tp: Any) -> str:
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")
