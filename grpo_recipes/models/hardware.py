"""The hardware a run trains on and what follows: precision (CPU: bf16 autocast only where it computes bf16
natively, AMX / AVX-512-BF16, else fp32), memory, glibc's allocator, and the engine (with `use_cpu`
accelerate drops FSDP's plugin and runs plain DDP; DeepSpeed ZeRO-2/3 run on CPU processes, README
"Scaling up")."""

import contextlib
import importlib.util
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_common.errors import ConfigError


@dataclass(frozen=True)
class Hardware:
    gpu: bool
    bf16: bool  # the device that trains computes bf16 natively
    world_size: int


def detect_hardware() -> Hardware:
    import torch

    gpu, bf16 = torch.cuda.is_available(), False
    if gpu:
        bf16 = torch.cuda.is_bf16_supported()
    elif os.path.isfile("/proc/cpuinfo"):  # AMX or AVX-512-BF16; elsewhere assume not
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), ":").split(":", 1)[1]
        bf16 = bool({"amx_bf16", "avx512_bf16"} & set(flags.split()))
    return Hardware(gpu=gpu, bf16=bf16, world_size=int(os.environ.get("WORLD_SIZE", "1")))


# glibc's malloc as a training step wants it: its heap on transparent huge pages, and freed memory kept for
# the next step instead of returned to the system and faulted back in 4 KB at a time (a default step took
# ~400k page faults, ~25k with these; ~8 % faster: benchmarks/RESULTS.md). Read only at process start.
MALLOC_TUNABLES = (
    "glibc.malloc.hugetlb=1:glibc.malloc.trim_threshold=4294967296:glibc.malloc.mmap_threshold=33554432"
)


def relaunch_with_malloc_tunables(entry_point: bool = False) -> None:
    """Start this command again, once, with GLIBC_TUNABLES=MALLOC_TUNABLES: on Linux with glibc, when the
    process is `python [options] <this script> ...` (not forked, piped in, or run by pdb, cProfile, coverage
    or another program) or the caller is its `entry_point` (a benchmark). The user's own allocator settings
    (GLIBC_TUNABLES, even empty; MALLOC_*_; LD_PRELOAD) are left as they are."""
    import platform

    if not (entry_point or _started_as_script()) or os.environ.get("GRPO_RECIPES_RELAUNCHED"):
        return
    if any(k in ("GLIBC_TUNABLES", "LD_PRELOAD") or k.startswith("MALLOC_") for k in os.environ):
        return  # the user's own allocator settings
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return
    os.environ.update(GLIBC_TUNABLES=MALLOC_TUNABLES, GRPO_RECIPES_RELAUNCHED="1")  # once: no loop
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError:  # no interpreter to start again: go on untuned
        del os.environ["GLIBC_TUNABLES"]


def _started_as_script() -> bool:
    script = len(sys.orig_argv) - len(sys.argv)
    if not sys.argv or script < 1 or sys.orig_argv[script:] != sys.argv or sys.argv[0] in ("", "-"):
        return False
    options = iter(sys.orig_argv[1:script])  # interpreter options only: no -m, -c or another program
    for option in options:
        if option in ("-X", "-W", "--check-hash-based-pycs"):
            next(options, None)  # its value
        elif not option.startswith("-") or option.startswith(("-m", "-c")):
            return False
    return True


def malloc_tuning() -> str:
    """For the run's log: whether this process asked glibc for MALLOC_TUNABLES, and why not."""
    if os.environ.get("GLIBC_TUNABLES") == MALLOC_TUNABLES:
        return "glibc malloc tuned (huge pages, freed memory kept)"
    return (
        "glibc malloc untuned (started another way, not on glibc, or the allocator settings are the user's)"
    )


def host_memory_bytes() -> int:
    """This process's share of the host's RAM (or of the container's cgroup limit, if lower)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError), open("/sys/fs/cgroup/memory.max") as f:  # cgroup v2
        limit = f.read().strip()  # "max" when unlimited
        memory = min(memory, int(limit)) if limit.isdigit() else memory
    return memory // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def resolve_activation_checkpointing(grpo: dict, model, hw: Hardware, lora: bool, memory_bytes=None) -> bool:
    """`activation_checkpointing: null` -> on only where the training state (weights + gradients + two AdamW
    moments; weights alone under LoRA) is over a quarter of the device's memory (benchmarks/RESULTS.md,
    target 6). Sets the key in `grpo` and returns it."""
    if grpo.get("activation_checkpointing") is None and grpo.get("gradient_checkpointing") is not None:
        grpo["activation_checkpointing"] = grpo["gradient_checkpointing"]  # the older name, set explicitly
    if grpo.get("activation_checkpointing") is None:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        state = weights if lora else 4 * weights
        if memory_bytes is None and hw.gpu:
            import torch

            memory_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        memory_bytes = host_memory_bytes() if memory_bytes is None else memory_bytes
        grpo["activation_checkpointing"] = state > memory_bytes / 4
    return bool(grpo["activation_checkpointing"])


def apply_hardware(grpo: dict[str, Any], hw: Hardware) -> None:
    if grpo.get("use_vllm"):
        if not hw.gpu:
            raise ConfigError(
                "use_vllm=true needs a CUDA GPU and none was found; drop it to generate with transformers"
            )
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("use_vllm=true but vllm is not installed: pip install -e '.[vllm]'")
    if not hw.gpu:
        if grpo.get("fp16"):
            raise ConfigError(
                "grpo.fp16=true needs a GPU; on a CPU-only machine leave it false "
                "(bf16 autocast is used where the CPU has native bf16, fp32 otherwise)"
            )
        grpo["use_cpu"] = True
    if grpo.get("bf16") is None:
        grpo["bf16"] = hw.bf16 and not grpo.get("fp16")
    if hw.gpu and grpo.get("use_cpu"):  # a GPU machine told to train on its CPU
        grpo["bf16"] = False


# GRPOConfig fields that, when set, change what generates or how: such runs were not measured with a static
# cache (benchmarks/RESULTS.md, "A static KV cache with a compiled decoding step") and keep TRL's default
UNMEASURED_WITH_STATIC_CACHE = ("use_cpu", "use_vllm", "fp16", "deepspeed", "fsdp", "torch_compile")


def default_generation_cache(grpo: dict[str, Any], hw: Hardware, lora: bool, multi_turn: bool) -> None:
    """`grpo.cache_implementation: null` -> `static` where it was measured: one process training every weight
    on one GPU under bf16 autocast, one turn a rollout. transformers then compiles the decoding step into CUDA
    graphs on the recipe's cache (train/static_cache.py): the default step 2.7x faster on an H200. Else
    TRL's default; on a CPU the recipe's own prefilled cache is the faster one."""
    if grpo.get("cache_implementation") is not None:
        return
    measured = hw.gpu and hw.world_size == 1 and launched_engine() is None and grpo.get("bf16") is True
    measured &= not (lora or multi_turn or any(grpo.get(key) for key in UNMEASURED_WITH_STATIC_CACHE))
    grpo["cache_implementation"] = "static" if measured else None


def check_engine(gpu: bool, env: Mapping[str, str] = os.environ) -> None:
    """What `accelerate launch` asked for reaches this process through the environment."""
    if launched_engine(env) == "FSDP" and not gpu:
        raise ConfigError(
            "accelerate config distributed_type: FSDP needs CUDA GPUs and none was found: on CPU "
            "processes accelerate runs plain DDP instead (nothing would be sharded). On a CPU use "
            "config/accelerate/cpu_ddp.yaml, or zero2.yaml / zero3.yaml (DeepSpeed shards on CPU "
            "processes with DS_ACCELERATOR=cpu)"
        )


def launched_engine(env: Mapping[str, str] = os.environ) -> str | None:
    """The sharding engine `accelerate launch` was asked for (config/accelerate/), as it tells each process:
    DeepSpeed or FSDP; both keep the trained weights in fp32 themselves (DeepSpeed's master weights;
    accelerate upcasts what FSDP shards and trains). None: neither."""
    for engine in ("DeepSpeed", "FSDP"):
        if env.get(f"ACCELERATE_USE_{engine.upper()}", "").lower() in ("1", "true", "yes"):
            return engine
    return None


def weights_dtype(
    model_cfg: dict[str, Any], hw: Hardware, grpo: Mapping[str, Any], trained: str | None = None
) -> str:
    """`model.dtype` as a torch dtype name. `auto`: `trained`, the dtype a checkpoint this package saved was
    trained in (eval_only on it then reproduces its run's evals); else bf16 where the trained weights' updates
    are kept: on a GPU with bf16, under LoRA (PEFT's fp32 adapters), DeepSpeed or FSDP (fp32 copies); on a CPU
    with native bf16 (`grpo.bf16` not false), a full fine-tune with transformers' AdamW, which bf16_adamw.py
    replaces by stochastic rounding (half the memory: benchmarks/RESULTS.md); else fp32, TRL's default."""
    dtype = model_cfg["dtype"]
    if dtype != "auto":
        return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)
    if trained:
        return trained
    lora, engine = model_cfg["lora"]["enabled"], launched_engine()
    if hw.gpu:
        kept = lora or engine is not None
    else:  # BF16AdamW (DeepSpeed on CPU processes keeps fp32: its CPU optimizer rounds its own way)
        from grpo_recipes.models.bf16_adamw import REPLACES

        optim, bf16 = grpo.get("optim"), grpo.get("bf16")
        kept = not lora and engine is None and (optim is None or optim in REPLACES) and bf16 is not False
    return "bfloat16" if hw.bf16 and kept else "float32"


def half_precision_warning(model, model_cfg: dict[str, Any], learning_rate: float) -> str | None:
    """One line when an optimizer will round half-precision weights to nearest in place (fp16 weights, or
    bf16 ones with a `grpo.optim` other than the AdamW that bf16_adamw.py replaces): the share of the trained
    weights that even a full step of `learning_rate` (Adam's largest, its first) cannot move. None under an
    engine that keeps fp32 weights."""
    import torch

    trained = [p for p in model.parameters() if p.requires_grad]
    half = [p for p in trained if p.dtype in (torch.bfloat16, torch.float16)]
    if not half or launched_engine():
        return None
    stuck = 0
    for p in half:
        # a step of lr is lost on |w| in [2^(e-1), 2^e) when under half its spacing, eps * 2^(e-2): so on
        # every |w| >= 2^floor(log2(lr / eps) + 2)
        bound = 2.0 ** math.floor(math.log2(learning_rate / torch.finfo(p.dtype).eps) + 2)
        stuck += sum(int((chunk.abs() >= bound).sum()) for chunk in p.detach().reshape(-1).split(1 << 24))
    share = stuck / sum(p.numel() for p in trained)
    dtypes = " and ".join(sorted({str(p.dtype)[6:] for p in half}))
    if model_cfg["lora"]["enabled"]:  # QLoRA (plain LoRA's adapters are fp32)
        key, what = f"model.lora.quantize={model_cfg['lora']['quantize']}", f"the {dtypes} LoRA adapters"
        fix = "TRL casts QLoRA's adapters to bf16; a LoRA learning rate (1e-4 or more) moves more of them"
    else:
        key, what = f"model.dtype={model_cfg['dtype']}", f"the {dtypes} weights"
        fix = "model.dtype=fp32 keeps fp32 weights and computes in bf16"
    return (
        f"{key}: AdamW trains {what} in place, and even a full step of learning_rate={learning_rate:g} "
        f"rounds away on {share:.0%} of the trained weights; {fix}"
    )


def emulated_bf16_warning(hw: Hardware, bf16_autocast: bool, model) -> str | None:
    """One line when a CPU run computes in bf16 that the CPU lacks (no AMX or AVX-512-BF16): grpo.bf16=true,
    or bf16 weights (model.dtype=bf16, or `auto` on a checkpoint trained in bf16). On a 2-core AVX2 AMD EPYC
    bf16 GEMMs ran at ~1 GFLOP/s against fp32's ~60-70 (benchmarks/RESULTS.md, "fp32 generation on packed
    weights")."""
    import torch

    half = any(p.dtype == torch.bfloat16 for p in model.parameters())
    if hw.gpu or hw.bf16 or not (bf16_autocast or half):
        return None
    asked = "grpo.bf16=true" if bf16_autocast else "bf16 weights"
    return (
        f"{asked}: this CPU has no native bf16 (AMX or AVX-512-BF16), so its bf16 matrix multiplies are "
        "emulated (~50x slower than fp32 on an AVX2 CPU); grpo.bf16=false model.dtype=fp32 computes in fp32"
    )


def check_generation_cast(model_cfg: dict[str, Any], args) -> None:
    """TRL 1.16 casts the model to bf16 (fp16) in place before generating with transformers' continuous
    batching: weights kept in fp32 to be trained would then train in half precision."""
    if not (args.use_transformers_continuous_batching and (args.bf16 or args.fp16)):
        return
    if not model_cfg["lora"]["enabled"] and launched_engine() is None:
        raise ConfigError(
            "grpo.use_transformers_continuous_batching=true: TRL casts the model to bf16 in place to "
            "generate that way, and AdamW would then lose most updates of this full fine-tune's weights; use "
            "it with LoRA (model.lora.enabled=true) or DeepSpeed, or generate with vLLM (use_vllm=true)"
        )


def running_engine(accelerator) -> str:
    from accelerate.utils import DistributedType

    state, kind = accelerator.state, accelerator.distributed_type
    if kind == DistributedType.DEEPSPEED:
        return f"DeepSpeed ZeRO-{state.deepspeed_plugin.zero_stage}"
    if kind == DistributedType.FSDP:
        return f"FSDP{state.fsdp_plugin.fsdp_version}"
    if kind == DistributedType.NO:
        return "single process"
    return "DDP"
