"""Two speed-ups for GRPOTrainer where TRL's defaults are tuned for GPUs (measured in
benchmarks/RESULTS.md, targets 1 and 2). The numbers stay the same up to bf16 rounding.

1. Generation under one autocast context. With fp32 weights and bf16 mixed precision, accelerate
   wraps each `forward` in autocast, and leaving autocast empties its cache of bf16 weight
   copies: every decoding step cast all the weights again, with identical tokens. An outer
   context keeps the copies for the whole `generate`.

2. Completion log-probs from the model's own logits on devices without Triton (CPU). TRL scores
   completions with a chunked "fused LM head" that never materialises the logits; without Triton
   it projects every position, prompts included, and runs its backward in fp32 with elementwise
   passes over [tokens, vocab] tiles. A CPU micro-batch's completion logits are small, so they are
   computed for the completion positions only (`logits_to_keep`), in the autocast dtype like any
   other layer, with a log-softmax in fp32; micro-batches too large for the host's memory, and the
   cases `install` lists, keep TRL's head.

Both stand in for TRL internals, so they are switched (`grpo.fast_paths`: auto | true | false):
`auto` installs them only on the TRL versions they were written and tested against, and only while
the internals they rely on (TRL_INTERFACE) look as they did then; otherwise the log says why not.
"""

from __future__ import annotations

import functools
import logging
import types
from typing import Any

from grpo_recipes.models.memory import trim_heap

log = logging.getLogger(__name__)

# The direct head holds a bf16 and a few fp32 copies of each completion-position logit.
BYTES_PER_LOGIT = 18


# TRL versions the fast paths were written and tested against, and the internals they rely on there.
TESTED_TRL = ("1.16.0",)
TRL_INTERFACE = {
    "trl.trainer.utils.add_fused_lm_head": (
        "model, temperature=1.0, cast_lm_head_to_fp32=False, outputs=('log_probs',)"
    ),
    "add_fused_lm_head's patched forward": (
        "self, *args, fused_lm_head, labels, shift_labels, num_items_in_batch, **kwargs"
    ),
    "trl.trainer.utils.FusedCausalLMOutput": (
        "loss, log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1, label_mask, aux_loss"
    ),
    "GRPOTrainer._get_per_token_logps_and_entropies calls": (
        "model(**model_inputs, labels=labels, fused_lm_head=True)"
    ),
}


def trl_interface() -> dict[str, str]:
    """The installed TRL's side of TRL_INTERFACE, spelled the same way."""
    import dataclasses
    import inspect

    from trl import GRPOTrainer
    from trl.trainer.utils import FusedCausalLMOutput, add_fused_lm_head

    def params(signature: inspect.Signature) -> str:
        return ", ".join(
            str(p.replace(annotation=inspect.Parameter.empty)) for p in signature.parameters.values()
        )

    inner = next(
        (c for c in add_fused_lm_head.__code__.co_consts if getattr(c, "co_name", "") == "_fused_forward"),
        None,
    )
    if inner is not None:  # the parameters of the forward TRL patches in (a closure inside it)
        keyword_only = inner.co_varnames[inner.co_argcount : inner.co_argcount + inner.co_kwonlyargcount]
        forward = ", ".join(["self", "*args", *keyword_only, "**kwargs"])
    else:
        forward = "not found"
    source = inspect.getsource(GRPOTrainer._get_per_token_logps_and_entropies)
    call = "model(**model_inputs, labels=labels, fused_lm_head=True)"
    return {
        "trl.trainer.utils.add_fused_lm_head": params(inspect.signature(add_fused_lm_head)),
        "add_fused_lm_head's patched forward": forward,
        "trl.trainer.utils.FusedCausalLMOutput": ", ".join(
            f.name for f in dataclasses.fields(FusedCausalLMOutput)
        ),
        "GRPOTrainer._get_per_token_logps_and_entropies calls": call if call in source else "another call",
    }


def interface_changes() -> list[str]:
    """The TRL internals that no longer look as the fast paths expect (empty: all as written for)."""
    installed = trl_interface()
    return [name for name, expected in TRL_INTERFACE.items() if installed.get(name) != expected]


def direct_head_budget() -> int:
    """Completion logits a micro-batch may have for the direct head, within a sixteenth of the host's
    memory; above it, TRL's memory-lean head is kept."""
    from grpo_recipes.models.hardware import host_memory_bytes

    return host_memory_bytes() // 16 // BYTES_PER_LOGIT


def generate_with_cached_casts(model, accelerator) -> None:
    """Run `model.generate` inside the accelerator's autocast context (a no-op without mixed precision);
    on a CPU, then return the memory generation freed to the OS."""
    generate = model.generate
    if getattr(generate, "_cached_casts", False):
        return

    on_cpu = accelerator.device.type == "cpu"

    @functools.wraps(generate)
    def generate_in_autocast(*args, **kwargs):
        try:
            with accelerator.autocast():
                return generate(*args, **kwargs)
        finally:
            if on_cpu:
                trim_heap()  # the weight copies and KV cache just freed (memory.py)

    generate_in_autocast._cached_casts = True
    model.generate = generate_in_autocast


def completion_logprob_head(model, temperature: float, max_logits: int | None = None) -> bool:
    """Wrap a model already patched by TRL's `add_fused_lm_head`: a `fused_lm_head=True` call on a
    CPU computes the same `FusedCausalLMOutput` (log-probs with gradient, entropy without) from the
    completion positions' logits; any call it does not cover goes to TRL's head unchanged.
    Returns False, changing nothing, on a model without TRL's head."""
    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    fused_forward = model.forward  # TRL's: the original forward when fused_lm_head is False
    if not _has_trl_head(fused_forward):
        return False  # not patched by this TRL's add_fused_lm_head: leave the model as it is
    max_logits = direct_head_budget() if max_logits is None else max_logits

    # The class's signature, as TRL keeps it: `generate` decides which inputs to pass (position_ids for
    # left padding, logits_to_keep) from it.
    @functools.wraps(type(model).forward)
    def forward(self, *args, fused_lm_head: bool = False, labels=None, **kwargs):
        direct = (
            fused_lm_head
            and labels is not None
            and not args
            and labels.device.type == "cpu"
            and kwargs.get("shift_labels") is None
            and not kwargs.get("output_router_logits")
        )
        if direct:
            valid = labels[:, 1:] != -100  # next-token labels, as TRL's head scores them
            scored = valid.any(0).nonzero()
            first = int(scored[0]) if len(scored) else valid.size(1)
            keep = valid.size(1) - first
            direct = (
                0 < keep and labels.size(0) * keep * self.config.get_text_config().vocab_size <= max_logits
            )
        if not direct:
            return fused_forward(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)

        num_items = kwargs.pop("num_items_in_batch", None)
        kwargs.pop("logits_to_keep", None)  # the head decides which positions it needs
        kwargs["use_cache"] = False
        # Logits for positions first..S-1; the last one predicts nothing.
        logits = fused_forward(logits_to_keep=keep + 1, **kwargs).logits[:, :-1]
        targets = labels[:, first + 1 :]
        mask = targets != -100
        logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
        log_probs = (
            logp_all.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)
        )
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1).masked_fill(~mask, 0.0)

        def widen(x):  # back to TRL's (batch, seq_len - 1), zero on the unscored prompt positions
            return torch.nn.functional.pad(x, (first, 0))

        loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items is None else num_items)
        return FusedCausalLMOutput(
            loss=loss, log_probs=widen(log_probs), entropy=widen(entropy), label_mask=widen(mask)
        )

    model.forward = types.MethodType(forward, model)
    return True


def _has_trl_head(forward) -> bool:
    """Whether TRL's `_fused_forward` is in this forward's chain of wrappers (accelerate wraps the
    reference model's forward in autocast before we see it)."""
    fn = getattr(forward, "__func__", forward)
    while fn is not None:
        code = getattr(fn, "__code__", None)
        if code is not None and "fused_lm_head" in code.co_varnames:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def apply(trainer, mode: bool | str = "auto") -> str:
    """Install the fast paths per `grpo.fast_paths`; returns what was installed, or why none (for the log)."""
    import trl

    if mode is False:
        return "off (grpo.fast_paths=false)"
    if trl.__version__ not in TESTED_TRL or interface_changes():
        why = (
            f"written for TRL {', '.join(TESTED_TRL)}, TRL {trl.__version__} is installed"
            if trl.__version__ not in TESTED_TRL
            else f"TRL's {', '.join(interface_changes())} changed"
        )
        if mode == "auto":
            return f"off: {why} (grpo.fast_paths=true installs them anyway)"
        log.warning("grpo.fast_paths=true: installing them although %s", why)
    return ", ".join(install(trainer)) or "none for this device"


def install(trainer) -> list[str]:
    """Install what fits this trainer's device and settings; returns what was installed."""
    installed = []
    generate_with_cached_casts(trainer.model, trainer.accelerator)
    if trainer.accelerator.mixed_precision != "no":
        installed.append("generation under one autocast context")
    args: Any = trainer.args
    # TRL patches the base model under PEFT, and the reference model when there is one (beta > 0).
    models = [trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model]
    if getattr(trainer, "ref_model", None) is not None:
        models.append(trainer.ref_model)
    # Kept on TRL's head: the entropy bonus (needs the entropy's gradient, which the direct head does
    # not keep) and an fp32 LM head (TRL runs it outside autocast).
    entropy_bonus = getattr(args, "entropy_coef", 0.0) != 0.0 or getattr(args, "use_adaptive_entropy", False)
    if trainer.accelerator.device.type == "cpu" and not entropy_bonus and not args.cast_lm_head_to_fp32:
        if all(completion_logprob_head(m, temperature=args.temperature) for m in models):
            installed.append("completion-only log-prob head")
        else:
            log.warning("TRL's fused LM head was not found: completion log-probs stay on TRL's path")
    return installed
