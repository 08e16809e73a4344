"""The recipe's attention on a CPU (benchmarks/RESULTS.md, "The step against the machine's limit"): eager in
passes with gradients, and in the decoding passes of a sampling `generate` whichever of SDPA and
decode_attention is faster on this CPU (matmuls_faster_at_one_query); SDPA elsewhere, so greedy generation
stays token-identical. Registered through transformers' public attention and mask interfaces
(recipe_attention)."""

import contextvars

# True while `generate` samples (set by fast_generation.fast_generate): its decoding passes may attend with
# decode_attention.
SAMPLING = contextvars.ContextVar("grpo_recipes_sampling", default=False)


def decode_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Attention for one query a sequence (a decoding pass) as two small matmuls on the key/value heads, in
    the inputs' dtype (bf16 under the generation's autocast, which computed an fp32 formulation in bf16
    too): SDPA's output within bf16 rounding, its CPU flash kernel keeping the scores in fp32. Which is
    faster depends on the CPU (matmuls_faster_at_one_query). Used only where `generate` samples: another
    kernel breaks greedy argmax ties differently, and greedy outputs stay token-identical to plain
    `generate`. Returns (output (batch, 1, heads, head dim), None), as SDPA's does."""
    import torch

    batch, heads, _, dim = query.shape
    q = query.view(batch, key.shape[1], heads // key.shape[1], dim)  # query heads by key head
    scores = torch.matmul(q, key.transpose(-1, -2)).mul_(dim**-0.5 if scaling is None else scaling)
    if attention_mask is not None:  # boolean (batch, 1, 1, kv length): True where a position is attended
        scores.masked_fill_(attention_mask[:, :, -1:, :].logical_not(), float("-inf"))
    out = torch.matmul(scores.softmax(-1), value)
    return out.view(batch, heads, 1, value.shape[-1]).transpose(1, 2), None


def matmuls_faster_at_one_query(model) -> bool:
    """Whether decode_attention beats SDPA's CPU kernel at one query a sequence here, timed once on the
    model's heads (16 rows over 64 positions of a 128-position cache buffer, as the default step decodes): it
    depends on the CPU. A layer took SDPA ~0.5 ms and decode_attention ~0.15 ms on an AMD EPYC without AMX,
    and ~0.07 and ~0.2 ms on an Intel Xeon with AMX (benchmarks/RESULTS.md)."""
    import time

    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    config = model.config.get_text_config()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    module = torch.nn.Module()  # what sdpa_attention_forward reads of an attention layer
    module.num_key_value_groups, module.is_causal = heads // kv_heads, True
    rng = torch.Generator().manual_seed(0)  # its own: the run's seeded sampling draws as it would without
    query = torch.randn(16, heads, 1, dim, generator=rng).bfloat16()
    key, value = (torch.randn(16, kv_heads, 128, dim, generator=rng).bfloat16()[:, :, :64] for _ in range(2))
    mask = torch.ones(16, 1, 1, 64, dtype=torch.bool)

    def seconds(kernel) -> float:  # the best of 3 rounds of 10 calls
        kernel(module, query, key, value, mask)
        rounds = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(10):
                kernel(module, query, key, value, mask)
            rounds.append(time.perf_counter() - start)
        return min(rounds)

    with torch.inference_mode():
        return seconds(decode_attention) < seconds(sdpa_attention_forward)


RECIPE_ATTENTION = "sdpa, eager with gradients"  # recipe_attention's name
# What eager attention may keep for the backward (its probabilities, fp32 + bf16: 6 bytes a score), all
# layers together, or one at a time under activation checkpointing; a longer batch attends with SDPA, whose
# flash backward keeps none. At full length the default step keeps 0.16 GiB, experiment=gsm8k 1.3;
# experiment=gsm8k_tools' 8 x ~730 tokens kept 6.9 (a 17 GiB run).
EAGER_ATTENTION_BYTES = 2 * 2**30


def eager_with_gradients(model, scores: int) -> bool:
    """Whether the recipe's attention runs eager in this pass over `scores` query-key pairs a head: a pass
    with gradients whose probabilities, all layers (one at a time under activation checkpointing), fit
    EAGER_ATTENTION_BYTES. It attends with the mask's kind: float for eager, boolean for SDPA."""
    import torch

    if not torch.is_grad_enabled():
        return False
    # a walk over every module: asked only in passes with gradients
    layers = 1 if model.is_activation_checkpointing else model.config.num_hidden_layers
    return scores * 6 * model.config.num_attention_heads * layers <= EAGER_ATTENTION_BYTES


def recipe_attention(model, matmuls: bool = True) -> str | None:
    """Eager attention in passes with gradients whose attention weights fit EAGER_ATTENTION_BYTES (SDPA's CPU
    flash backward is ~3x eager's), with `matmuls` decode_attention in the decoding passes of a sampling
    `generate` (where matmuls_faster_at_one_query), SDPA in the others (greedy generation, evals, reference
    log-probs, long sequences); benchmarks/RESULTS.md. Registered through transformers' public attention and
    mask interfaces, not saved with the config. Returns why it is off, or None."""
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

    def mask(batch_size, q_length, kv_length, *args, **kwargs):  # float for eager, boolean (or none): SDPA
        eager_here = eager_with_gradients(model, batch_size * q_length * kv_length)
        return (eager_mask if eager_here else sdpa_mask)(batch_size, q_length, kv_length, *args, **kwargs)

    def attention(module, query, key, value, attention_mask, **kwargs):
        if attention_mask is not None and attention_mask.is_floating_point():
            return eager(module, query, key, value, attention_mask, **kwargs)
        plain = not kwargs.get("dropout") and kwargs.get("position_bias") is None
        if matmuls and query.shape[2] == 1 and plain and SAMPLING.get() and not torch.is_grad_enabled():
            return decode_attention(module, query, key, value, attention_mask, **kwargs)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionMaskInterface.register(RECIPE_ATTENTION, mask)
    AttentionInterface.register(RECIPE_ATTENTION, attention)
    model.set_attn_implementation(RECIPE_ATTENTION)
    return None
