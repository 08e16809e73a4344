"""CPU speed-ups for GRPOTrainer (benchmarks/RESULTS.md, "The step against the machine's limit"): the fast
generation of train/fast_generation.py; completion log-probs from the model's own logits, each distinct
prompt once and the completions packed (train/completion_head.py); eager attention where gradients flow,
matmuls in sampled decoding where faster here; decoder layers compiled for the passes with gradients
(`grpo.compile_layers`). The head stands in for a TRL internal, so `grpo.fast_paths: auto` installs them only
on the TRL versions they were tested on (TESTED_TRL)."""

import functools

from grpo_common.errors import ConfigError
from grpo_recipes.train.attention import matmuls_faster_at_one_query, recipe_attention
from grpo_recipes.train.completion_head import completion_logprob_head
from grpo_recipes.train.fast_generation import fast_generation
from grpo_recipes.train.packed_decoding import decoding_dtypes, packed_weights_off
from grpo_recipes.train.static_cache import static_cache_generation

TESTED_TRL = ("1.16.0",)


# One decoder layer compiles for all (dynamic shapes) in ~30 s, ~8 s from inductor's on-disk cache, and takes
# ~0.5-1 s off the embedded 135M model's ~2 s of training passes (benchmarks/RESULTS.md): `auto` compiles runs
# this long, of models this large (a smaller model saves less a step).
COMPILE_FROM_STEPS, COMPILE_FROM_PARAMETERS = 100, 100e6


def layers_not_compiled(trainer, mode: bool | str) -> str | None:
    """Why `grpo.compile_layers` (`mode`) leaves the decoder layers eager here, or None once they are compiled
    (compile_decoder_layers). `true` refuses what `auto` goes without, except a short run."""
    import torch

    args, accelerator = trainer.args, trainer.accelerator
    why = None
    if mode is False:
        return "grpo.compile_layers=false"
    if accelerator.device.type != "cpu":
        why = "CPU runs only (grpo.torch_compile is TRL's whole-model compile)"
    elif accelerator.num_processes > 1:
        why = "single-process runs only"
    elif trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        why = "DeepSpeed and FSDP wrap the layers with their own hooks"
    elif hasattr(trainer.model, "get_base_model"):
        why = "full fine-tuning only (LoRA's layers were not measured)"
    elif args.activation_checkpointing or args.gradient_checkpointing:
        why = "activation checkpointing is on"
    elif args.torch_compile:
        why = "grpo.torch_compile is on"
    elif mode == "auto" and (
        args.max_steps < COMPILE_FROM_STEPS or trainer.model.num_parameters() < COMPILE_FROM_PARAMETERS
    ):
        return (
            f"auto compiles runs of max_steps >= {COMPILE_FROM_STEPS} on models of "
            f"{COMPILE_FROM_PARAMETERS / 1e6:.0f}M+ parameters (the compile takes ~30 s)"
        )
    if why is None:
        try:  # a C++ compiler for inductor, asked once here rather than at the first training pass
            torch.compile(lambda x: x + 1)(torch.zeros(1))
        except Exception as e:  # noqa: BLE001 - any failure means: run eager, and say why
            why = f"torch.compile is unavailable ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    if why is None and not compile_decoder_layers(trainer.model):
        why = "no decoder layers (transformers' GradientCheckpointingLayer) found"
    if why and mode is True:
        raise ConfigError(f"grpo.compile_layers=true: {why}; auto goes without")
    return why


def compile_decoder_layers(model) -> int:
    """Compile each decoder layer's forward for calls with gradients (one graph serves every layer of a kind,
    shapes dynamic); calls without (generation, evals, reference log-probs) stay eager. Returns the layers.
    The compiled forward keeps its layer: a deep copy of the model would train the original's weights."""
    import torch
    from transformers.modeling_layers import GradientCheckpointingLayer

    def by_grad_mode(compiled, eager, *args, **kwargs):
        return (compiled if torch.is_grad_enabled() else eager)(*args, **kwargs)

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer.forward = functools.partial(
            by_grad_mode, torch.compile(layer.forward, dynamic=True), layer.forward
        )
    return len(layers)


def apply(trainer, mode: bool | str | None = None) -> str:
    """Install the fast paths per `grpo.fast_paths` (the trainer's args, unless `mode` is given), and the
    recipe's static KV cache where grpo.cache_implementation asks for one, whatever the mode (transformers'
    own fails under autocast); returns what was installed, or why none."""
    said = fast_paths_by_mode(trainer, mode)
    if getattr(trainer.args, "cache_implementation", None) == "static":
        said += f", {static_cache_generation(trainer.model)}"
    return said


def fast_paths_by_mode(trainer, mode: bool | str | None) -> str:
    """`true` refuses what `auto` falls back from (untested TRL, no fused head)."""
    import trl

    mode = getattr(trainer.args, "fast_paths", "auto") if mode is None else mode
    if mode is False:
        why = "grpo.fast_paths=false"
    elif trl.__version__ not in TESTED_TRL:
        why = f"written for TRL {', '.join(TESTED_TRL)}, TRL {trl.__version__} is installed"
        if mode is True:
            raise ConfigError(f"grpo.fast_paths=true: {why}; auto falls back to TRL's own paths")
    else:
        return ", ".join(install(trainer, strict=mode is True))
    if getattr(trainer.args, "compile_layers", "auto") is True:  # one of the fast paths
        raise ConfigError(f"grpo.compile_layers=true: the fast paths are off ({why})")
    return f"off ({why})" if mode is False else f"off: {why}"


def install(trainer, strict: bool = False) -> list[str]:
    accelerator = trainer.accelerator
    why = packed_weights_off(accelerator, decoding_dtypes(trainer.model, accelerator))
    if strict and why and accelerator.device.type == "cpu":
        raise ConfigError(f"grpo.fast_paths=true: packed weights off: {why}; auto goes without")
    installed = [fast_generation(trainer.model, accelerator)]
    args = trainer.args
    # TRL patches the base model under PEFT, and the reference model when there is one (beta > 0).
    models = [trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model]
    models += [trainer.ref_model] if trainer.ref_model is not None else []
    not_compiled = layers_not_compiled(trainer, getattr(args, "compile_layers", "auto"))
    unshared = None if not_compiled else "the decoder layers are compiled"  # measured without the cache
    if args.activation_checkpointing or args.gradient_checkpointing:  # checkpointed layers drop a cache
        unshared = "activation checkpointing is on"
    # Kept on TRL's head: a GPU (TRL's Triton head is fast there), the entropy bonus (needs the entropy's
    # gradient, which the direct head does not keep) and an fp32 LM head (TRL runs it outside autocast).
    why = None
    if trainer.accelerator.device.type != "cpu":
        why = "TRL's own head on a GPU"
    elif args.entropy_coef != 0.0 or args.use_adaptive_entropy:
        why = "the entropy bonus needs TRL's head"
    elif args.cast_lm_head_to_fp32:
        why = "grpo.cast_lm_head_to_fp32 keeps TRL's fp32 head"
    elif not all(completion_logprob_head(m, args.temperature, share_prompts=not unshared) for m in models):
        why = "TRL's fused LM head was not found"
        if strict:
            raise ConfigError(f"grpo.fast_paths=true: {why} to stand in for; auto falls back to it")

    def said(name: str, why_off: str | None) -> str:
        return f"{name} off: {why_off}" if why_off else name

    installed.append(said("completion-only log-prob head", why))
    unshared = "the completion-only head is off" if why else unshared
    installed.append(said("each distinct prompt once, completions packed in the training passes", unshared))
    why = "SDPA's backward is fast on a GPU" if trainer.accelerator.device.type != "cpu" else None
    sdpa = why is None and models[0].config._attn_implementation == "sdpa"
    matmuls = sdpa and matmuls_faster_at_one_query(models[0])
    why = why or recipe_attention(models[0], matmuls=matmuls)
    decoding = "SDPA (faster here than matmuls)" if sdpa and not matmuls else "matmuls"
    installed.append(said(f"eager attention with gradients, {decoding} in sampled decoding", why))
    installed.append(said("decoder layers compiled for the training passes", not_compiled))
    return installed
