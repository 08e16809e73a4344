"""Generation and attention on a CPU for GRPOTrainer and the fixed eval (benchmarks/RESULTS.md, "The step
against the machine's limit"): one autocast context (none in an fp32 run) in inference mode, weights packed
once per `generate` for oneDNN's decode GEMMs (train/packed_decoding.py), a KV cache in buffers, each distinct
prompt prefilled once, in generation and (with gradients) in the training passes; it sets the sampling flag
the recipe's attention reads (train/attention.py). Greedy outputs are token-identical to plain `generate`
(under autocast in bf16; tests/test_fast_paths.py)."""

import contextlib
import functools

from grpo_recipes.train.attention import SAMPLING
from grpo_recipes.train.packed_decoding import (
    autocast_dtype,
    decoding_dtypes,
    dtype_names,
    packed_linears,
    packed_weights_off,
    qkv_apart,
)


def buffered_cache(model, dtype=None):
    """A DynamicCache whose layers keep keys and values in `dtype` (the autocast dtype SDPA casts them to: the
    same values; None: their own) in buffers grown by doubling, where DynamicLayer concatenates the whole
    cache at every token. None for models with other kinds of layers (sliding windows, ...)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    class BufferedLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.dtype, self.buffers = dtype or key_states.dtype, None
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
                self.buffers = [key_states.new_empty(shape, dtype=self.dtype) for shape in shapes]
                for buffer, x in zip(self.buffers, old or ()):
                    buffer[..., :n, :] = x
            for buffer, x in zip(self.buffers, (key_states, value_states)):
                buffer[..., n : n + add, :] = x
            self.keys, self.values = (buffer[..., : n + add, :] for buffer in self.buffers)
            return self.keys, self.values

        def batch_select_indices(self, indices):  # in one copy (DynamicLayer's: a copy, then one to grow)
            if getattr(self, "buffers", None) is None or self.keys.data_ptr() != self.buffers[0].data_ptr():
                return super().batch_select_indices(indices)
            n = self.get_seq_length()
            self.buffers = [buffer.index_select(0, indices) for buffer in self.buffers]
            self.keys, self.values = (buffer[..., :n, :] for buffer in self.buffers)

    cache = DynamicCache(config=model.config)
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [BufferedLayer() for _ in cache.layers]
    return cache


def sequences_per_prompt(kwargs: dict) -> int:
    """The rows `generate` decodes for each prompt row (`num_return_sequences`, e.g. pass@k's samples)."""
    config = kwargs.get("generation_config")
    return kwargs.get("num_return_sequences") or getattr(config, "num_return_sequences", None) or 1


def fill_distinct_prefixes(model, cache, kwargs: dict, length: int, numbered: bool, expand: bool = True):
    """Fill `cache` with the first `length` columns of each distinct row of the inputs' ids and mask, computed
    once, and, with `expand`, expand it to every row (GRPO repeats each prompt `num_generations` times).
    Returns each row's distinct row (indices into the cache's rows), or None, the cache untouched, where no
    row repeats or the inputs hold more than ids and a mask (images, token types, ...).
    `numbered`: positions from the mask, as `generate` numbers left padding; else from the first column, as
    the model numbers them without position_ids (TRL's training passes). The decoder body only: its logits
    would be thrown away, and the head's [rows, 1, hidden] slice takes a batched GEMM on a copy of the
    expanded 113 MB weight (~0.17 s a step); a model whose get_decoder is itself (transformers' default for
    some, e.g. Mllama) computes one position's logits."""
    import torch

    ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    others = any(torch.is_tensor(v) for k, v in kwargs.items() if k not in ("input_ids", "attention_mask"))
    if others or mask is None or length < 1:
        return None
    both = torch.cat([ids[:, :length], mask[:, :length]], dim=1)
    unique, rows = torch.unique(both, dim=0, return_inverse=True)
    if len(unique) == len(ids):
        return None
    ids, mask = unique[:, :length], unique[:, length:]
    positions = {"position_ids": (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)} if numbered else {}
    body = model.get_decoder()
    head = {"logits_to_keep": 1} if hasattr(body, "generate") else {}
    body(input_ids=ids, attention_mask=mask, past_key_values=cache, **positions, **head)
    if expand:
        cache.batch_select_indices(rows)
    return rows


def prefilled_cache(model, kwargs: dict, dtype=None):
    """The buffered cache (in autocast's dtype; None: the keys' own) for a `generate` call, holding all but
    the last token of each distinct prompt (computed once): `generate` then computes only the last prompt
    token onwards. Left empty where the prompts are distinct (the fixed eval)."""
    cache = buffered_cache(model, dtype)
    if cache is not None and sequences_per_prompt(kwargs) == 1:
        fill_distinct_prefixes(model, cache, kwargs, kwargs["input_ids"].size(1) - 1, numbered=True)
    return cache


def shared_prompt_cache(model, kwargs: dict, length: int):
    """For a training pass (`kwargs`: the model's inputs): (cache, rows), a DynamicCache of the first `length`
    columns (the prompts, left-padded to one length) of each distinct row, computed once with gradients, and
    each row's index into it (the 8 copies of each prompt are about half a default step's training FLOPs).
    None where no row repeats, under activation checkpointing (checkpointed layers drop a cache) or where the
    model's cache has other kinds of layers."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = DynamicCache(config=model.config)
    if model.is_activation_checkpointing or not all(type(layer) is DynamicLayer for layer in cache.layers):
        return None
    rows = fill_distinct_prefixes(model, cache, kwargs, length, numbered=False, expand=False)
    return None if rows is None else (cache, rows)


def normal_tensors(out):
    """`generate`'s output (ids, or a ModelOutput of tensors and tuples of them) made in inference mode, as
    normal tensors: autograd may save them for a backward (inference tensors it refuses)."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.clone() if out.is_inference() else out
    if isinstance(out, tuple | list):
        return type(out)(normal_tensors(x) for x in out)
    if isinstance(out, dict):  # ModelOutput: its fields set again, in place
        for key, value in out.items():
            out[key] = normal_tensors(value)
    return out


@contextlib.contextmanager
def ended_rows_skipped(model, kwargs: dict, config, made: bool):
    """Within it, the decoding passes of a `generate` on a cache the recipe `made` for this call (one handed
    in, static_cache.py's or a caller's, keeps every row) compute only the rows that
    have not ended (emitted an end-of-sequence token): generate decodes every row until the last one ends,
    and a batch whose answers end at different lengths computes the longest one's passes for all rows (the
    trained model's eval answers, ~11 tokens, in batches of 64 decoded to 32). An ended row leaves the cache
    and the passes; its logits are zeros, whose token generate replaces by padding. The other rows compute
    what they would among all (tests/test_fast_paths.py: the same tokens). Plain decoding only: one beam, no
    assistant, no scores, logits, hidden states, attentions or cache returned (an ended row's would be
    zeros, or gone)."""
    import torch

    def asked(name):  # a generation setting, passed to this call or in its config
        return kwargs.get(name, getattr(config, name, None))

    eos = asked("eos_token_id")  # whose emission ends a row (none: no row ends early)
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    # made: on packed weights, so the call passed input_ids; the cache is None for a model it cannot hold
    plain = made and eos and kwargs.get("past_key_values") is not None
    plain = plain and (asked("num_beams") or 1) == 1 and not kwargs.get("assistant_model")
    unplain = ("output_scores", "output_logits", "output_hidden_states", "output_attentions")
    unplain += ("return_dict_in_generate", "prompt_lookup_num_tokens")
    plain = plain and not any(asked(name) for name in unplain)
    if not plain:
        yield
        return
    before = vars(model).get("forward")  # an instance forward (TRL's head), else the class's
    forward, eos, state, prompt = model.forward, torch.tensor(eos), {}, kwargs["input_ids"].size(1)
    per_row = ("input_ids", "attention_mask", "position_ids")

    @functools.wraps(forward)
    def skipping(*args, **kw):
        ids, cache = kw.get("input_ids"), kw.get("past_key_values")
        others = any(torch.is_tensor(v) for k, v in kw.items() if k not in (*per_row, "cache_position"))
        if args or others or ids is None or ids.size(1) != 1 or cache is not kwargs["past_key_values"]:
            return forward(*args, **kw)
        if "active" not in state:  # the first decoding pass: every row
            state["active"], state["ended"] = torch.arange(len(ids)), torch.zeros(len(ids), dtype=torch.bool)
        if cache.get_seq_length() >= prompt:  # a generated token: an end-of-sequence one ends its row
            state["ended"] |= torch.isin(ids[:, 0], eos)
        active = state["active"]
        keep = ~state["ended"][active]
        if keep.any() and not keep.all():  # (none left: generate has stopped)
            cache.batch_select_indices(keep.nonzero().squeeze(1))
            state["active"] = active = active[keep]
        if len(active) == len(ids):
            return forward(**kw)
        out = forward(**{k: v[active] if k in per_row and torch.is_tensor(v) else v for k, v in kw.items()})
        every = out.logits.new_zeros((len(ids), *out.logits.shape[1:]))
        out.logits = every.index_copy_(0, active, out.logits)
        return out

    model.forward = skipping
    try:
        yield
    finally:
        if before is None:
            del model.forward
        else:
            model.forward = before


def fast_generation(model, accelerator) -> str:
    """Run `model.generate` inside one autocast context (leaving it, as accelerate does after each forward,
    drops its bf16 weight copies) and, on a CPU, on packed weights with the prefilled cache; an fp32 CPU run
    the same without autocast. Returns what was installed."""
    autocast = accelerator.mixed_precision != "no"
    if not autocast and accelerator.device.type != "cpu":
        return "generation under one autocast context off: fp32, no weight is cast"
    import torch

    cast, dtypes = autocast_dtype(accelerator), decoding_dtypes(model, accelerator)
    why_not_packed = packed_weights_off(accelerator, dtypes)
    # On a CPU generate runs in inference mode: bit for bit no_grad's tokens, ~10 % less time a decoding pass
    # (no autograd bookkeeping on ~2,000 small ops); its outputs are copied out as normal tensors.
    on_cpu = accelerator.device.type == "cpu"
    generate = model.generate
    if not getattr(generate, "_fast", False):

        @functools.wraps(generate)
        def fast_generate(*args, **kwargs):
            ids = kwargs.get("input_ids")  # TRL and the eval pass keywords; other calls: autocast alone
            pack = why_not_packed is None and ids is not None
            rows = len(ids) * sequences_per_prompt(kwargs) if pack else 0  # one token a decoded sequence
            config = kwargs.get("generation_config") or model.generation_config
            sampling = SAMPLING.set(bool(kwargs.get("do_sample", config.do_sample)))
            # a cache asked for by name is transformers' to make (static_cache.py's arrives made): given
            # one more, generate refuses
            asked = kwargs.get("cache_implementation", config.cache_implementation)
            # a cache handed in (static_cache.py's) outlives the call: its tensors stay normal ones
            inference = torch.inference_mode(on_cpu and kwargs.get("past_key_values") is None)
            try:
                with accelerator.autocast(), packed_linears(model, rows=rows, cast=cast), inference:
                    # the prefill runs F.linear on the weights as they were packed (cast under autocast)
                    own_cache = pack and not asked and kwargs.get("use_cache", True)
                    made = own_cache and kwargs.get("past_key_values") is None
                    if made:
                        kwargs["past_key_values"] = prefilled_cache(model, kwargs, cast)
                    with ended_rows_skipped(model, kwargs, config, made):
                        out = generate(*args, **kwargs)
            finally:
                SAMPLING.reset(sampling)
            return normal_tensors(out)

        fast_generate._fast = True
        model.generate = fast_generate
    where = "generation under one autocast context" if autocast else "generation without autocast"
    if why_not_packed:
        return f"{where}, packed weights off: {why_not_packed}"
    apart = qkv_apart(model)
    return f"{where}, on packed {dtype_names(dtypes)} weights, " + (
        f"q/k/v in one GEMM off: {apart}" if apart else "q/k/v in one GEMM"
    )
