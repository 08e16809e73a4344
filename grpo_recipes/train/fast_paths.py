"""Two CPU speed-ups for GRPOTrainer (benchmarks/RESULTS.md, targets 1 and 2): generation under one autocast
context, and completion log-probs from the model's own logits. Both stand in for TRL internals, so
`grpo.fast_paths: auto` installs them only on the TRL versions they were tested on (TESTED_TRL)."""

from __future__ import annotations

import functools
import inspect
import logging
import types

from grpo_common.errors import ConfigError
from grpo_recipes.models.hardware import host_memory_bytes, trim_heap

log = logging.getLogger(__name__)

TESTED_TRL = ("1.16.0",)


def generate_with_cached_casts(model, accelerator) -> None:
    """Run `model.generate` inside one autocast context: leaving autocast, as accelerate does after each
    `forward`, empties its cache of bf16 weight copies, so every decoding step cast all the weights again."""
    generate = model.generate
    if getattr(generate, "_cached_casts", False):
        return

    @functools.wraps(generate)
    def generate_in_autocast(*args, **kwargs):
        try:
            with accelerator.autocast():
                return generate(*args, **kwargs)
        finally:
            if accelerator.device.type == "cpu":
                trim_heap()  # return the weight copies and KV cache just freed to the OS

    generate_in_autocast._cached_casts = True
    model.generate = generate_in_autocast


def completion_logprob_head(model, temperature: float, max_logits: int | None = None) -> bool:
    """Wrap a model patched by TRL's `add_fused_lm_head`: a `fused_lm_head=True` call on a CPU computes the
    same `FusedCausalLMOutput` from the completion positions' logits only, in the autocast dtype (without
    Triton TRL's head projects every position, prompts included, in fp32 tiles). Other calls go to TRL's
    head unchanged. Returns False, changing nothing, without TRL's head."""
    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    fused_forward = model.forward  # TRL's: the original forward when fused_lm_head is False
    if not _has_trl_head(fused_forward):
        return False
    # Completion logits a micro-batch may have for the direct head: a sixteenth of the host's memory at 18
    # bytes a logit (a bf16 and a few fp32 copies); above it, TRL's memory-lean head is kept.
    max_logits = host_memory_bytes() // 16 // 18 if max_logits is None else max_logits

    # The class's signature, as TRL keeps it: `generate` decides which inputs to pass (position_ids for
    # left padding, logits_to_keep) from it.
    @functools.wraps(type(model).forward)
    def forward(self, *args, fused_lm_head: bool = False, labels=None, **kwargs):
        keep = 0
        plain = args or kwargs.get("shift_labels") is not None or kwargs.get("output_router_logits")
        if fused_lm_head and labels is not None and labels.device.type == "cpu" and not plain:
            valid = labels[:, 1:] != -100  # next-token labels, as TRL's head scores them
            scored = valid.any(0).nonzero()
            first = int(scored[0]) if len(scored) else valid.size(1)
            keep = valid.size(1) - first
        if not 0 < keep or labels.size(0) * keep * self.config.get_text_config().vocab_size > max_logits:
            return fused_forward(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)

        num_items = kwargs.pop("num_items_in_batch", None)
        kwargs.pop("logits_to_keep", None)  # the head decides which positions it needs
        kwargs["use_cache"] = False
        logits = fused_forward(logits_to_keep=keep + 1, **kwargs).logits[:, :-1]
        targets = labels[:, first + 1 :]
        mask = targets != -100
        logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
        picked = logp_all.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        log_probs = picked.masked_fill(~mask, 0.0)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1).masked_fill(~mask, 0.0)

        # back to TRL's (batch, seq_len - 1), zero on the unscored prompt positions
        widen = functools.partial(torch.nn.functional.pad, pad=(first, 0))
        loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items is None else num_items)
        return FusedCausalLMOutput(
            loss=loss, log_probs=widen(log_probs), entropy=widen(entropy), label_mask=widen(mask)
        )

    model.forward = types.MethodType(forward, model)
    return True


def _has_trl_head(forward) -> bool:
    """Whether TRL's `_fused_forward` is in this forward's chain of wrappers (accelerate may wrap it)."""

    def trl(fn) -> bool:
        return "fused_lm_head" in getattr(getattr(fn, "__code__", None), "co_varnames", ())

    return trl(inspect.unwrap(getattr(forward, "__func__", forward), stop=trl))


def apply(trainer, mode: bool | str | None = None) -> str:
    """Install the fast paths per `grpo.fast_paths` (the trainer's args, unless `mode` is given); returns what
    was installed, or why none. `true` refuses what `auto` falls back from (untested TRL, no fused head)."""
    import trl

    mode = getattr(trainer.args, "fast_paths", "auto") if mode is None else mode
    if mode is False:
        return "off (grpo.fast_paths=false)"
    if trl.__version__ not in TESTED_TRL:
        why = f"written for TRL {', '.join(TESTED_TRL)}, TRL {trl.__version__} is installed"
        if mode is True:
            raise ConfigError(f"grpo.fast_paths=true: {why}; auto falls back to TRL's own paths")
        return f"off: {why}"
    return ", ".join(install(trainer, strict=mode is True))


def install(trainer, strict: bool = False) -> list[str]:
    generate_with_cached_casts(trainer.model, trainer.accelerator)
    fp32 = trainer.accelerator.mixed_precision == "no"
    installed = [f"generation under one autocast context{' off: fp32, no weight is cast' if fp32 else ''}"]
    args = trainer.args
    # TRL patches the base model under PEFT, and the reference model when there is one (beta > 0).
    models = [trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model]
    models += [trainer.ref_model] if trainer.ref_model is not None else []
    # Kept on TRL's head: a GPU (TRL's Triton head is fast there), the entropy bonus (needs the entropy's
    # gradient, which the direct head does not keep) and an fp32 LM head (TRL runs it outside autocast).
    why = None
    if trainer.accelerator.device.type != "cpu":
        why = "TRL's own head on a GPU"
    elif args.entropy_coef != 0.0 or args.use_adaptive_entropy:
        why = "the entropy bonus needs TRL's head"
    elif args.cast_lm_head_to_fp32:
        why = "grpo.cast_lm_head_to_fp32 keeps TRL's fp32 head"
    elif not all(completion_logprob_head(m, temperature=args.temperature) for m in models):
        why = "TRL's fused LM head was not found"
        if strict:
            raise ConfigError(f"grpo.fast_paths=true: {why} to stand in for; auto falls back to it")
    installed.append(f"completion-only log-prob head{f' off: {why}' if why else ''}")
    return installed
