"""The distributed engine: the one `accelerate launch` asked for (its config file sets it in the
environment), whether this hardware can run it, and the one that really runs (the trainer's
accelerator), which is what the log names.

Found on this machine (torch 2.13 CPU, accelerate 1.15; README "Scaling up"): DeepSpeed ZeRO-2 and
ZeRO-3 run on CPU processes (gloo, DS_ACCELERATOR=cpu). FSDP does not: with `use_cpu` accelerate
makes the processes MULTI_CPU and drops the FSDP plugin, so the run would be plain DDP. Asking for
FSDP without a GPU is therefore refused rather than run as something else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from grpo_common.errors import ConfigError


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "false").lower() in ("1", "true", "yes")


def requested_engine(env: Mapping[str, str] = os.environ) -> str:
    """What the launch asked for: 'deepspeed', 'fsdp', or 'ddp' / 'single' by the process count."""
    if _flag(env, "ACCELERATE_USE_DEEPSPEED"):
        return "deepspeed"
    if _flag(env, "ACCELERATE_USE_FSDP"):
        return "fsdp"
    return "ddp" if int(env.get("WORLD_SIZE", "1")) > 1 else "single"


def check_engine(gpu: bool, env: Mapping[str, str] = os.environ) -> None:
    """A launch this hardware cannot run as asked is an error, never a silent fallback."""
    if requested_engine(env) == "fsdp" and not gpu:
        raise ConfigError(
            "accelerate config distributed_type: FSDP needs CUDA GPUs and none was found: on CPU "
            "processes accelerate runs plain DDP instead (nothing would be sharded). On a CPU use "
            "config/accelerate/cpu_ddp.yaml, or zero2.yaml / zero3.yaml (DeepSpeed shards on CPU "
            "processes with DS_ACCELERATOR=cpu)"
        )


def running_engine(accelerator) -> str:
    """The engine the trainer's accelerator really runs, in words for the log."""
    from accelerate.utils import DistributedType

    state = accelerator.state
    kind = accelerator.distributed_type
    if kind == DistributedType.DEEPSPEED:
        return f"DeepSpeed ZeRO-{state.deepspeed_plugin.zero_stage}"
    if kind == DistributedType.FSDP:
        return f"FSDP{state.fsdp_plugin.fsdp_version}"
    if kind == DistributedType.NO:
        return "single process"
    return "DDP"
