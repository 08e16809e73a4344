"""CPU speed-ups for GRPOTrainer (benchmarks/RESULTS.md, "The step against the machine's limit"):
generation under one autocast context on packed bf16 weights, with a bf16 KV cache and each distinct
prompt prefilled once; completion log-probs from the model's own logits; eager attention where gradients
flow. The head stands in for a TRL internal, so `grpo.fast_paths: auto` installs them only on the TRL
versions they were tested on (TESTED_TRL)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import types

from grpo_common.errors import ConfigError
from grpo_recipes.models.hardware import host_memory_bytes

log = logging.getLogger(__name__)

TESTED_TRL = ("1.16.0",)


def packed_weights_off(accelerator) -> str | None:
    """Why `generate` cannot run on packed bf16 weights here, or None when it can."""
    import torch
    from accelerate.utils import DistributedType

    if accelerator.device.type != "cpu" or accelerator.mixed_precision != "bf16":
        return "bf16 autocast on a CPU only"
    if accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
        return "the weights are sharded"
    if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return "this torch has no oneDNN bf16 GEMM"
    return None


@contextlib.contextmanager
def packed_linears(model, rows: int):
    """Every `nn.Linear` of `model` computes its decoding passes (`rows` rows: one token a sequence) from its
    weight cast to bf16 and reordered once for oneDNN's GEMM: F.linear under autocast reorders it on every
    call, which at 16 rows costs more than the multiply. The same bf16 GEMM: token-identical greedy
    generations (tests/test_fast_paths.py). Other shapes (the prefill) keep F.linear, whose kernel choice
    varies with the row count, on the same bf16 copy (what autocast would cast again). torch 2.13 has no
    public API for packing (inductor's freezing packs weights the same way, but freezes them), so it calls
    the op inductor emits."""
    import torch

    def packed_forward(weight, packed, bias, x):  # autocast's F.linear, on weights cast once
        x = x.to(torch.bfloat16)
        if x.numel() != rows * x.shape[-1]:
            return torch.nn.functional.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    linears = [m for m in model.modules() if type(m) is torch.nn.Linear and m.weight.device.type == "cpu"]
    for m in linears:
        weight = m.weight.detach().to(torch.bfloat16)
        bias = None if m.bias is None else m.bias.detach().to(torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
        m.forward = functools.partial(packed_forward, weight, packed, bias)
    try:
        yield
    finally:
        for m in linears:
            del m.forward  # back to the class's forward; the bf16 copies are freed


def buffered_cache(model, dtype):
    """A DynamicCache for `generate` whose full-attention layers keep keys and values in `dtype` (the
    autocast dtype, which SDPA casts them to anyway) in buffers grown by doubling: DynamicLayer concatenates
    the whole cache at every token, and rotary embeddings leave the keys in fp32. Same values, same outputs.
    None where the model has other kinds of layers (sliding windows, ...)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    class BufferedLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.dtype, self.buffers = dtype, None
            n, add = self.get_seq_length(), key_states.shape[-2]
            # (re)allocate: first use, full, or keys replaced by another Cache method (batch select, reorder)
            if (
                self.buffers is None
                or self.buffers[0].shape[-2] < n + add
                or (n > 0 and self.keys.data_ptr() != self.buffers[0].data_ptr())
            ):
                old = (self.keys, self.values) if n else None
                size = max(2 * (n + add), 64)
                shapes = [(*x.shape[:-2], size, x.shape[-1]) for x in (key_states, value_states)]
                self.buffers = [key_states.new_empty(shape, dtype=dtype) for shape in shapes]
                for buffer, x in zip(self.buffers, old or ()):
                    buffer[..., :n, :] = x
            for buffer, x in zip(self.buffers, (key_states, value_states)):
                buffer[..., n : n + add, :] = x
            self.keys, self.values = (buffer[..., : n + add, :] for buffer in self.buffers)
            return self.keys, self.values

    cache = DynamicCache(config=model.config)
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [BufferedLayer() for _ in cache.layers]
    return cache


def prefill_once_per_prompt(model, kwargs: dict, cache) -> None:
    """GRPO generates each prompt `num_generations` times, as separate rows. Fill `cache` with all but the
    last token of each distinct prompt, once, and expand it to every row: `generate` then computes only the
    last prompt token and what follows. Nothing happens where the rows' prompts are distinct (the fixed
    eval)."""
    import torch

    ids, mask, config = (kwargs.get(k) for k in ("input_ids", "attention_mask", "generation_config"))
    inputs = [k for k, v in kwargs.items() if torch.is_tensor(v) and k not in ("input_ids", "attention_mask")]
    samples = kwargs.get("num_return_sequences") or getattr(config, "num_return_sequences", None) or 1
    if inputs or mask is None or ids.size(1) < 2 or samples > 1:  # images, token types, ...: left alone
        return
    unique, rows = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    if len(unique) == len(ids):
        return
    ids, mask = unique[:, : ids.size(1) - 1], unique[:, ids.size(1) : -1]
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as generate numbers left-padded prompts
    model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, logits_to_keep=1)
    cache.batch_select_indices(rows)


def fast_generation(model, accelerator, strict: bool = False) -> str:
    """Run `model.generate` inside one autocast context (leaving autocast, as accelerate does after each
    `forward`, empties its cache of bf16 weight copies, so every decoding step would cast all the weights
    again) and, on a CPU, on packed bf16 weights with a bf16 KV cache. Returns what was installed; `strict`
    refuses a bf16 CPU run that cannot pack."""
    import torch

    if accelerator.mixed_precision == "no":
        return "generation under one autocast context off: fp32, no weight is cast"
    why_not_packed = packed_weights_off(accelerator)
    if strict and why_not_packed and accelerator.device.type == "cpu":
        raise ConfigError(f"grpo.fast_paths=true: packed weights off: {why_not_packed}; auto goes without")
    generate = model.generate
    if not getattr(generate, "_fast", False):

        @functools.wraps(generate)
        def fast_generate(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            with contextlib.ExitStack() as stack:
                stack.enter_context(accelerator.autocast())
                if why_not_packed is None and ids is not None:
                    stack.enter_context(packed_linears(model, rows=len(ids)))
                    if kwargs.get("past_key_values") is None and kwargs.get("use_cache", True):
                        kwargs["past_key_values"] = cache = buffered_cache(model, torch.bfloat16)
                        if cache is not None and not args:
                            prefill_once_per_prompt(model, kwargs, cache)
                return generate(*args, **kwargs)

        fast_generate._fast = True
        model.generate = fast_generate
    return "generation under one autocast context, " + (
        f"packed weights off: {why_not_packed}" if why_not_packed else "on packed bf16 weights"
    )


EAGER_FOR_GRADIENTS = "sdpa, eager with gradients"  # the attention name registered below


def eager_attention_for_gradients(model) -> str | None:
    """Attention as eager matmuls in passes that keep gradients, SDPA in the others (generation, evals,
    reference log-probs): on a CPU SDPA's flash-attention backward takes ~16 ms a layer at the default
    step's shapes, eager's forward and backward together less than half of that (benchmarks/RESULTS.md).
    Registered through transformers' public attention and mask interfaces; not saved with the model's
    config. Returns why it is off, or None."""
    import sys

    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    if model.config._attn_implementation != "sdpa":
        return f"attention is {model.config._attn_implementation}, not sdpa"
    eager = getattr(sys.modules[type(model).__module__], "eager_attention_forward", None)
    if eager is None:  # each model's modeling file defines its own (softcapping, sinks, ...)
        return f"{type(model).__name__} has no eager_attention_forward"

    def mask(*args, **kwargs):  # a float mask for eager, SDPA's boolean (or none) otherwise
        return (eager_mask if torch.is_grad_enabled() else sdpa_mask)(*args, **kwargs)

    def attention(module, query, key, value, attention_mask, **kwargs):
        if attention_mask is not None and attention_mask.is_floating_point():
            return eager(module, query, key, value, attention_mask, **kwargs)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionMaskInterface.register(EAGER_FOR_GRADIENTS, mask)
    AttentionInterface.register(EAGER_FOR_GRADIENTS, attention)
    model.set_attn_implementation(EAGER_FOR_GRADIENTS)
    return None


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
    # Completion logits a micro-batch may have for the direct head: a sixteenth of the host's memory at 4
    # bytes a logit (the bf16 logits and their gradient); above it, TRL's memory-lean head is kept.
    max_logits = host_memory_bytes() // 16 // 4 if max_logits is None else max_logits

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
        picked, entropy = token_logprobs().apply(logits, targets.clamp(min=0), temperature)
        log_probs, entropy = picked.masked_fill(~mask, 0.0), entropy.masked_fill(~mask, 0.0)

        # back to TRL's (batch, seq_len - 1), zero on the unscored prompt positions
        widen = functools.partial(torch.nn.functional.pad, pad=(first, 0))
        loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items is None else num_items)
        return FusedCausalLMOutput(
            loss=loss, log_probs=widen(log_probs), entropy=widen(entropy), label_mask=widen(mask)
        )

    model.forward = types.MethodType(forward, model)
    return True


CHUNK_ELEMENTS = 8 << 20  # 32 MB of fp32 work in the direct head's log-softmax


@functools.cache
def token_logprobs():
    """An autograd Function: (log softmax(logits / T) at `targets`, entropy) for bf16 `logits` (batch,
    positions, vocab), computed in fp32 a few sequences at a time, so no fp32 tensor over the vocabulary is
    kept: the backward recomputes each chunk's softmax from the bf16 logits (benchmarks/RESULTS.md). The
    entropy has no gradient (the entropy bonus keeps TRL's head)."""
    import torch

    def chunks(logits):  # whole sequences, CHUNK_ELEMENTS fp32 elements of work at a time
        step = max(1, CHUNK_ELEMENTS // max(1, logits[0].numel()))
        return [slice(i, i + step) for i in range(0, logits.size(0), step)]

    class TokenLogProbs(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, targets, temperature):
            lse = logits.new_empty(logits.shape[:-1], dtype=torch.float32)
            entropy = torch.empty_like(lse)
            for rows in chunks(logits):
                logp = logits[rows].float() / temperature  # a new fp32 tensor, even from fp32 logits
                lse[rows] = torch.logsumexp(logp, dim=-1)
                logp.sub_(lse[rows].unsqueeze(-1))
                entropy[rows] = -(logp.exp() * logp).sum(-1)
            picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float() / temperature - lse
            ctx.save_for_backward(logits, targets, lse)
            ctx.temperature = temperature
            ctx.mark_non_differentiable(entropy)
            return picked, entropy

        @staticmethod
        def backward(ctx, grad_picked, _):
            logits, targets, lse = ctx.saved_tensors
            g = (grad_picked / ctx.temperature).unsqueeze(-1)
            grad = torch.empty_like(logits)
            for rows in chunks(logits):  # d picked / d logits = (one-hot(target) - softmax) / T
                p = (logits[rows].float() / ctx.temperature).sub_(lse[rows].unsqueeze(-1)).exp_()
                grad[rows] = p.mul_(-g[rows]).scatter_add_(-1, targets[rows].unsqueeze(-1), g[rows])
            return grad, None, None

    return TokenLogProbs


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
    installed = [fast_generation(trainer.model, trainer.accelerator, strict)]
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
    why = "SDPA's backward is fast on a GPU" if trainer.accelerator.device.type != "cpu" else None
    why = why or eager_attention_for_gradients(models[0])
    installed.append(f"eager attention in the training passes{f' off: {why}' if why else ''}")
    return installed
