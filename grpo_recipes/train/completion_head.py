"""The training passes' completion log-probs on a CPU (benchmarks/RESULTS.md, "The step against the machine's
limit"): TRL's fused LM head computed from the completion positions' logits only, each distinct prompt once,
and the completions packed into rows without their padding (pack_completions)."""

import functools
import inspect
import types

from grpo_recipes.models.hardware import host_memory_bytes
from grpo_recipes.train.attention import RECIPE_ATTENTION, eager_with_gradients
from grpo_recipes.train.fast_generation import shared_prompt_cache


def completion_logprob_head(model, temperature: float, share_prompts: bool = True) -> bool:
    """Wrap a model patched by TRL's `add_fused_lm_head`: a `fused_lm_head=True` call on a CPU computes the
    same `FusedCausalLMOutput` from the completion positions' logits only, in the autocast dtype (without
    Triton TRL's head projects every position, prompts included, in fp32 tiles), and, with `share_prompts`,
    each distinct prompt once (shared_prompt_cache) with the completions packed (pack_completions). Other
    calls go to TRL's head unchanged. Returns False, changing nothing, without TRL's head."""
    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    fused_forward = model.forward  # TRL's: the original forward when fused_lm_head is False
    if not _has_trl_head(fused_forward):
        return False
    # Completion logits a micro-batch may have for the direct head: a sixteenth of the host's memory at 4
    # bytes a logit (the bf16 logits and their gradient); above it, TRL's memory-lean head is kept.
    max_logits = host_memory_bytes() // 16 // 4

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
        targets = labels[:, first + 1 :]
        mask = targets != -100
        shared = shared_prompt_cache(self, kwargs, first) if share_prompts else None
        if shared is None:  # every row whole
            logits = fused_forward(logits_to_keep=keep + 1, **kwargs).logits[:, :-1]
            picked, entropy = token_logprobs().apply(logits, targets.clamp(min=0), temperature)
        else:
            packed = pack_completions(self, kwargs, *shared, mask, targets)
            logits = fused_forward(**packed.inputs).logits
            picked, entropy = token_logprobs().apply(logits, packed.targets, temperature)
            picked, entropy = packed.unpack(picked), packed.unpack(entropy.detach())
        log_probs, entropy = picked.masked_fill(~mask, 0.0), entropy.masked_fill(~mask, 0.0)

        # back to TRL's (batch, seq_len - 1), zero on the unscored prompt positions
        widen = functools.partial(torch.nn.functional.pad, pad=(first, 0))
        loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items is None else num_items)
        return FusedCausalLMOutput(
            loss=loss, log_probs=widen(log_probs), entropy=widen(entropy), label_mask=widen(mask)
        )

    model.forward = types.MethodType(forward, model)
    return True


class PackedCompletions:
    """A training pass's completions packed into rows (pack_completions): the model's inputs, the targets in
    the packed layout, and `unpack`, which lays a packed (rows, width) tensor out as (batch, completion
    columns), zero where nothing was computed."""

    def __init__(self, inputs: dict, targets, where: tuple, shape: tuple):
        self.inputs, self.targets, self.where, self.shape = inputs, targets, where, shape

    def unpack(self, packed):
        rows, columns, bins, slots = self.where
        return packed.new_zeros(self.shape).index_put((rows, columns), packed[bins, slots])


def pack_completions(model, kwargs: dict, cache, prompt_of, mask, targets) -> PackedCompletions:
    """Pack a training pass's rows into fewer, shorter ones: each row's last prompt token and its completion
    up to its last scored token (its segment) is placed, longest first, in the first packed row of its prompt
    with room (as wide as the longest segment). Each packed row runs behind its prompt in `cache` (the
    distinct prompts' columns, once each; `prompt_of` names each row's), its segments attending to the prompt
    and, causally, to themselves, at the positions they have in their rows. GRPO's completions end at
    different lengths and a pass is as long as its longest: the padding was 11-36 % of the default run's
    training tokens (benchmarks/RESULTS.md, "Completions packed"). `kwargs`: the model's inputs (ids and mask
    of the whole rows); `mask` and `targets`: the scored completion columns and their tokens (batch,
    columns), the first column predicted by the last prompt token."""
    import torch

    ids, attention = kwargs["input_ids"], kwargs["attention_mask"]
    batch, columns = mask.shape
    first = ids.size(1) - columns - 1  # the last prompt token's column
    scored = torch.arange(1, columns + 1).expand(batch, -1).masked_fill(~mask, 0)
    lengths = scored.amax(1).tolist()  # a segment: the last prompt token and the completion to its last score
    width, prompt_of = max(lengths), prompt_of.tolist()
    room, prompt_rows, where = [], [], []  # each packed row's free slots and a row of its prompt; each row's
    for row in sorted(range(batch), key=lambda r: -lengths[r]):  # (packed row, first slot)
        if not (n := lengths[row]):
            continue  # nothing scored: no segment
        own = (b for b, free in enumerate(room) if prompt_of[prompt_rows[b]] == prompt_of[row] and free >= n)
        if (bin_ := next(own, None)) is None:
            bin_ = len(room)
            room.append(width)
            prompt_rows.append(row)
        where.append((row, bin_, width - room[bin_]))
        room[bin_] -= n
    sizes = [lengths[r] for r, _, _ in where]
    rows, bins, starts = torch.tensor(where).repeat_interleave(torch.tensor(sizes), dim=0).unbind(1)
    offsets = torch.cat([torch.arange(n) for n in sizes])  # each token's place in its segment
    slots = starts + offsets
    columns_in_row = first + offsets  # each token's column in its own row: its position, as TRL numbers them

    packed_shape = (len(room), width)
    packed_ids = ids.new_zeros(packed_shape).index_put((bins, slots), ids[rows, columns_in_row])
    positions = ids.new_zeros(packed_shape).index_put((bins, slots), columns_in_row)
    scored_targets = targets[rows, offsets].clamp(min=0)
    packed_targets = targets.new_zeros(packed_shape).index_put((bins, slots), scored_targets)
    segment = ids.new_full(packed_shape, -1).index_put((bins, slots), rows)  # -1: an empty slot
    attended = attention.new_zeros(packed_shape).index_put((bins, slots), attention[rows, columns_in_row])

    # the keys: the packed row's prompt's columns (its left padding aside), then the packed row's own slots
    prompt_keys = attention[prompt_rows, :first].bool().unsqueeze(1).expand(-1, width, -1)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    own_segment = (segment.unsqueeze(-1) == segment.unsqueeze(-2)) & causal & attended.bool().unsqueeze(-2)
    own_segment |= torch.eye(width, dtype=torch.bool) & (segment < 0).unsqueeze(-1)  # empty slots: themselves
    allowed = torch.cat([prompt_keys, own_segment], dim=-1).unsqueeze(1)
    cache.batch_select_indices(torch.tensor([prompt_of[r] for r in prompt_rows]))  # each packed row's prompt
    inputs = {k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask")}
    inputs |= {
        "input_ids": packed_ids,
        "position_ids": positions,
        "attention_mask": attention_mask_for(model, allowed),
        "past_key_values": cache,
    }
    return PackedCompletions(inputs, packed_targets, (rows, offsets, bins, slots), (batch, columns))


def attention_mask_for(model, allowed):
    """The 4D mask `allowed` (True: attend) as the model's attention takes it: boolean where the recipe's
    attention is to run SDPA on it (no gradients, or eager's probabilities would not fit), else float (0 or
    the dtype's minimum, as transformers' eager mask), which eager and SDPA both take."""
    import torch

    recipe = model.config._attn_implementation == RECIPE_ATTENTION
    if recipe and not eager_with_gradients(model, allowed[:, 0].numel()):
        return allowed
    dtype = model.get_input_embeddings().weight.dtype
    return torch.where(allowed, torch.zeros((), dtype=dtype), torch.finfo(dtype).min)


CHUNK_ELEMENTS = 8 << 20  # 32 MB of fp32 work in the direct head's log-softmax


@functools.cache
def token_logprobs():
    """An autograd Function: (log softmax(logits / T) at `targets`, entropy) of bf16 `logits` (batch,
    positions, vocab) in fp32 a few sequences at a time, keeping no fp32 vocabulary tensor: the backward
    recomputes each chunk's softmax. The entropy has no gradient (the entropy bonus keeps TRL's head)."""
    import torch

    def chunks(logits):  # whole sequences, CHUNK_ELEMENTS fp32 elements of work at a time
        step = max(1, CHUNK_ELEMENTS // max(1, logits[0].numel()))
        return [slice(i, i + step) for i in range(0, logits.size(0), step)]

    def scaled(logits, temperature):  # a new fp32 tensor, even from fp32 logits; x / 1.0 is x, skipped
        x = logits.to(torch.float32, copy=True)
        return x if temperature == 1.0 else x.div_(temperature)

    class TokenLogProbs(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, targets, temperature):
            lse = logits.new_empty(logits.shape[:-1], dtype=torch.float32)
            entropy = torch.empty_like(lse)
            for rows in chunks(logits):
                logp = scaled(logits[rows], temperature)
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
                p = scaled(logits[rows], ctx.temperature).sub_(lse[rows].unsqueeze(-1)).exp_()
                grad[rows] = p.mul_(-g[rows]).scatter_add_(-1, targets[rows].unsqueeze(-1), g[rows])
            return grad, None, None

    return TokenLogProbs


def _has_trl_head(forward) -> bool:
    """Whether TRL's `_fused_forward` is in this forward's chain of wrappers (accelerate may wrap it)."""

    def trl(fn) -> bool:
        return "fused_lm_head" in getattr(getattr(fn, "__code__", None), "co_varnames", ())

    return trl(inspect.unwrap(getattr(forward, "__func__", forward), stop=trl))
