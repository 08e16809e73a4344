"""Decoding passes on weights packed once per `generate` for oneDNN (benchmarks/RESULTS.md, "The step
against the machine's limit"): every `nn.Linear` on its packed weight, and transformers' Llama decoder
layers in one function that computes q, k and v in one packed GEMM and rotates q and k together. In bf16
(autocast) bit for bit the tokens and logits of plain `generate` under autocast; in fp32, where F.linear
runs MKL's GEMM (the 49k-column LM head at 16 rows took 49 ms, oneDNN's packed 16), the same greedy tokens
and logits within fp32 rounding (tests/test_fast_paths.py)."""

import contextlib
import functools


def autocast_dtype(accelerator):
    """The dtype autocast computes `generate`'s linears in, or None without autocast (each in its
    weight's)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(accelerator.mixed_precision)


def decoding_dtypes(model, accelerator) -> set:
    """The dtypes `generate`'s linears compute in: the autocast dtype, else each weight's own (a LoRA model on
    bf16 weights keeps fp32 adapters)."""
    import torch

    cast = autocast_dtype(accelerator)
    return {cast} if cast else {m.weight.dtype for m in model.modules() if type(m) is torch.nn.Linear}


def dtype_names(dtypes) -> str:
    """bf16, fp32, ... for a log line."""
    import torch

    short = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float16: "fp16"}
    return " and ".join(sorted(short.get(d, str(d).removeprefix("torch.")) for d in dtypes))


def packed_weights_off(accelerator, dtypes) -> str | None:
    """Why `generate` cannot run on weights packed in `dtypes` here, or None when it can."""
    import torch
    from accelerate.utils import DistributedType

    if accelerator.device.type != "cpu":
        return "a CPU only"
    if other := set(dtypes) - {torch.bfloat16, torch.float32}:
        return f"bf16 or fp32 only, not {dtype_names(other)}"
    if accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP):
        return "the weights are sharded"
    if not torch.backends.mkldnn.is_available():
        return "this torch has no oneDNN"
    if torch.bfloat16 in dtypes and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "oneDNN has no bf16 GEMM on this CPU (no AVX-512 or AMX)"
    return None


def fusable(layer) -> bool:
    """Whether `layer` is transformers' Llama decoder layer as decoding_layer reproduces it: its own attention
    and MLP classes, plain bias-free CPU linears for q, k and v (LoRA's wrap them)."""
    import torch
    from transformers.models.llama import modeling_llama as llama

    attention = getattr(layer, "self_attn", None)
    if type(layer) is not llama.LlamaDecoderLayer or type(attention) is not llama.LlamaAttention:
        return False
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    plain = all(
        type(m) is torch.nn.Linear and m.bias is None and "forward" not in vars(m) for m in projections
    )
    return plain and attention.q_proj.weight.device.type == "cpu" and type(layer.mlp) is llama.LlamaMLP


def qkv_apart(model) -> str | None:
    """Why the decoder layers of `model` keep q, k and v in GEMMs of their own, or None."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    others = sorted({type(m).__name__ for m in layers if not fusable(m)})
    if not layers or others:
        return f"not transformers' Llama layers with bias-free q/k/v ({', '.join(others) or 'no layers'})"
    return None


def decoding_layer(layer, qkv, rows: int, dtype):
    """`layer`'s forward for the decoding passes of up to `rows` rows (one token each, no gradients; fewer
    once ended rows leave, fast_generation.ended_rows_skipped): its own modules, with q, k and v from `qkv`
    (their weights stacked and packed) and the rotary embedding applied to q and k in one go: the same ops on
    the same values as LlamaDecoderLayer and LlamaAttention (transformers 5.23). Other calls (the prefill,
    passes with gradients) go to the forward it replaces."""
    import torch
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward, rotate_half

    original, attention = layer.forward, layer.self_attn
    config, dim = attention.config, attention.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads

    def forward(
        hidden_states,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache=False,
        position_embeddings=None,
        **kwargs,
    ):
        batch, tokens = hidden_states.shape[:2]
        if tokens != 1 or batch > rows or past_key_values is None or torch.is_grad_enabled():
            return original(
                hidden_states,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=use_cache,
                position_embeddings=position_embeddings,
                **kwargs,
            )
        residual = hidden_states
        x = layer.input_layernorm(hidden_states).to(dtype)
        states = torch.ops.mkldnn._linear_pointwise(x, qkv, None, "none", [], "")
        qk = states[..., : (heads + kv_heads) * dim].view(batch, 1, heads + kv_heads, dim).transpose(1, 2)
        value = states[..., (heads + kv_heads) * dim :].view(batch, 1, kv_heads, dim).transpose(1, 2)
        cos, sin = (t.unsqueeze(1) for t in position_embeddings)  # apply_rotary_pos_emb's, q and k at once
        query, key = (qk * cos + rotate_half(qk) * sin).split([heads, kv_heads], dim=1)
        key, value = past_key_values.update(key, value, attention.layer_idx)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)
        out, _ = attend(
            attention,
            query,
            key,
            value,
            attention_mask,
            dropout=0.0,
            scaling=attention.scaling,
            position_ids=position_ids,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = residual + attention.o_proj(out.reshape(batch, 1, -1).contiguous())
        return hidden_states + layer.mlp(layer.post_attention_layernorm(hidden_states))

    return forward


@contextlib.contextmanager
def packed_linears(model, rows: int, cast=None):
    """Every `nn.Linear` of `model` computes its decoding passes (up to `rows` rows, one token a sequence;
    0: none) from its weight cast to `cast` (autocast's dtype; None: its own, bf16 or fp32) and reordered once
    for oneDNN (F.linear under autocast reorders it at every call): in bf16 the same GEMM, bit for bit. Other
    shapes (the prefill) keep F.linear, whose kernel varies with the row count, on the same copy. A Linear
    whose forward was replaced (TRL's fp32 LM head, `cast_lm_head_to_fp32`) keeps it. Llama decoder layers
    decode through decoding_layer, their q, k and v packed as one weight (one GEMM of 960 columns took ~70 us
    at 16 rows, three ~135). No public API packs in torch 2.13 (inductor's freezing also freezes the weights),
    so this calls the op inductor emits."""
    import torch

    def packed_forward(weight, packed, bias, x):  # autocast's F.linear, on weights cast once
        x = x.to(weight.dtype)
        if x.dim() != 3 or x.shape[1] != 1 or x.shape[0] > rows:  # not a decoding pass's rows
            return torch.nn.functional.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    def pack(weight):
        return torch.ops.mkldnn._reorder_linear_weight(weight, rows)

    modules = list(model.modules()) if rows else []
    layers = {m: vars(m).get("forward") for m in modules if fusable(m)}  # and a forward set before (compiled)
    stacked = {id(p) for m in layers for p in (m.self_attn.q_proj, m.self_attn.k_proj, m.self_attn.v_proj)}
    linears = [
        m
        for m in modules
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and id(m) not in stacked
        and "forward" not in vars(m)
    ]
    for m in linears:
        weight = m.weight.detach().to(cast or m.weight.dtype)
        bias = None if m.bias is None else m.bias.detach().to(weight.dtype)
        m.forward = functools.partial(packed_forward, weight, pack(weight), bias)
    for m in layers:
        projections = (m.self_attn.q_proj, m.self_attn.k_proj, m.self_attn.v_proj)
        dtype = cast or m.self_attn.q_proj.weight.dtype
        qkv = torch.cat([p.weight.detach().to(dtype) for p in projections])
        m.forward = decoding_layer(m, pack(qkv), rows, dtype)
    try:
        yield
    finally:
        for m in linears:
            del m.forward  # back to the class's forward; the packed copies are freed
        for m, before in layers.items():
            if before is None:
                del m.forward
            else:
                m.forward = before
