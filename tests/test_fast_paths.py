"""The fast paths change speed, never results: same log-probs and gradients as TRL's head, same tokens."""

import copy
import functools
import inspect

import pytest
import torch

from grpo_common.errors import ConfigError
from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer
from grpo_recipes.train import attention, completion_head, fast_generation, fast_paths, packed_decoding
from grpo_recipes.train.completion_head import completion_logprob_head
from grpo_recipes.train.static_cache import static_cache_generation

# oneDNN packs bf16 weights only on CPUs with AVX-512 or AMX; fp32 ones everywhere (an AVX2-only AMD EPYC
# runs fp32). The generation tests run in each precision this CPU packs.
PACKS_BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
NEEDS_BF16_PACKING = pytest.mark.skipif(not PACKS_BF16, reason="oneDNN packs no bf16 here (no AVX-512/AMX)")
PRECISIONS = [pytest.param("bf16", marks=NEEDS_BF16_PACKING), "no"]  # accelerate's mixed_precision


def generation_line(precision: str, rest: str = "q/k/v in one GEMM") -> str:
    """fast_generation's install line on a CPU in `precision` (accelerate's mixed_precision)."""
    if precision == "bf16":
        return f"generation under one autocast context, on packed bf16 weights, {rest}"
    return f"generation without autocast, on packed fp32 weights, {rest}"


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def batch(vocab: int, prompt: int = 7, completion: int = 5):
    """Left-padded prompts, right-padded completions, labels only on completion tokens (as TRL builds
    them)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (4, prompt + completion), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # a short prompt
    mask[1, prompt + 2 :] = 0  # a completion that ended early
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :prompt] = -100
    return ids, mask, labels


def heads(tokenizer, temperature):
    from trl.trainer.utils import add_fused_lm_head

    trl_model = tiny_model(tokenizer, seed=1, hidden_size=64)
    ours = copy.deepcopy(trl_model)
    for m in (trl_model, ours):
        add_fused_lm_head(m, temperature=temperature, outputs=("log_probs", "entropy"))
    completion_logprob_head(ours, temperature=temperature)
    return trl_model, ours


def score(model, ids, mask, labels, bf16: bool):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    advantages = torch.linspace(-1, 1, out.log_probs.size(1))
    (out.log_probs * advantages).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    return out, grads


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_direct_head_matches_trl_fused_head(tokenizer, bf16, temperature, monkeypatch):
    import trl.trainer.utils

    trl_model, ours = heads(tokenizer, temperature)
    ids, mask, labels = batch(len(tokenizer))
    expected, expected_grads = score(trl_model, ids, mask, labels, bf16)

    def not_taken(*args):
        raise AssertionError("TRL's chunked head was called: the direct path was not taken")

    monkeypatch.setattr(trl.trainer.utils._ChunkedLogProbFunction, "apply", not_taken)
    got, grads = score(ours, ids, mask, labels, bf16)

    assert got.log_probs.shape == expected.log_probs.shape == (ids.size(0), ids.size(1) - 1)
    assert torch.equal(got.label_mask, expected.label_mask)
    assert (got.log_probs[~got.label_mask] == 0).all() and (got.log_probs[got.label_mask] < 0).all()
    assert torch.allclose(got.log_probs, expected.log_probs, atol=1e-5)
    assert torch.allclose(got.entropy, expected.entropy, atol=1e-4)
    assert torch.allclose(got.loss, expected.loss, atol=1e-5)
    if bf16:  # the backward GEMMs round to bf16 in a different order: close, not equal
        assert torch.nn.functional.cosine_similarity(grads, expected_grads, dim=0) > 0.9999
    else:
        assert torch.allclose(grads, expected_grads, atol=1e-6, rtol=1e-4)


def grpo_batch(vocab: int, prompt: int = 7, completion: int = 5):
    """Two left-padded prompts, each repeated for a group of 3 completions (right-padded), as TRL lays out
    a GRPO micro-batch."""
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(4, vocab, (2, prompt), generator=gen).repeat_interleave(3, 0)
    ids = torch.cat([prompts, torch.randint(4, vocab, (6, completion), generator=gen)], dim=1)
    mask = torch.ones_like(ids)
    mask[:3, :2] = 0  # the first prompt is shorter
    mask[1, prompt + 2 :] = mask[4, prompt + 1 :] = 0  # completions that ended early
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :prompt] = -100
    return ids, mask, labels


def decoder_calls(model) -> list[tuple[int, int]]:
    """The (rows, columns) of every call of the model's decoder body, recorded as they happen."""
    calls = []
    model.get_decoder().register_forward_pre_hook(
        lambda m, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    return calls


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_each_distinct_prompt_goes_through_the_training_pass_once(tokenizer, bf16, temperature):
    """The training pass runs each distinct prompt (less its last token) once, with gradients, and every
    row's last prompt token and completion on that cache: the same log-probs, entropy, loss and gradients as
    TRL's head over the whole rows."""
    trl_model, ours = heads(tokenizer, temperature)
    ids, mask, labels = grpo_batch(len(tokenizer))
    rows = decoder_calls(ours)
    expected, expected_grads = score(trl_model, ids, mask, labels, bf16)
    got, grads = score(ours, ids, mask, labels, bf16)
    # 2 prompts of 6 columns, then the 6 rows' last prompt token and completion to its last scored token
    # (5, 2, 5 behind the first prompt; 5, 1, 5 behind the second) in rows of 5, a prompt's own
    assert rows == [(2, 6), (6, 5)]
    assert torch.equal(got.label_mask, expected.label_mask)
    # bf16 GEMMs of 2 rows and of 6 round alike with oneDNN on AVX-512 / AMX, not on AVX2 (~1e-3 apart)
    atol = 1e-5 if not bf16 or PACKS_BF16 else 2e-3
    assert torch.allclose(got.log_probs, expected.log_probs, atol=atol)
    assert torch.allclose(got.entropy, expected.entropy, atol=max(atol, 1e-4))
    assert torch.allclose(got.loss, expected.loss, atol=atol)
    if bf16:
        assert torch.nn.functional.cosine_similarity(grads, expected_grads, dim=0) > 0.9999
    else:
        assert torch.allclose(grads, expected_grads, atol=1e-6, rtol=1e-4)


def uneven_grpo_batch(vocab: int):
    """grpo_batch with completions of 5, 2, 1, 3, 0 (masked whole, as TRL's mask_truncated_completions does)
    and 2 scored tokens."""
    ids, mask, labels = grpo_batch(vocab)
    for row, scored in [(2, 1), (3, 3), (4, 0), (5, 2)]:
        mask[row, 7 + max(scored, 1) :] = 0
        labels[row, 7 + scored :] = -100
    return ids, mask, labels


@pytest.mark.parametrize("kernel", ["eager", "sdpa", "plain sdpa"])
def test_packed_completions_match_trls_head_whatever_attends(tokenizer, monkeypatch, kernel):
    """Completions of uneven lengths, one masked whole, packed behind each distinct prompt: with the recipe's
    eager attention (a float mask), its SDPA past the eager budget (a boolean one) and plain SDPA (float),
    with and without gradients, the log-probs, entropy, loss and gradients of TRL's head over the whole
    rows."""
    trl_model, ours = heads(tokenizer, 1.0)
    if kernel != "plain sdpa":
        assert attention.recipe_attention(ours) is None
    if kernel == "sdpa":
        monkeypatch.setattr(attention, "EAGER_ATTENTION_BYTES", 0)
    ids, mask, labels = uneven_grpo_batch(len(tokenizer))
    rows = decoder_calls(ours)
    expected, expected_grads = score(trl_model, ids, mask, labels, False)
    got, grads = score(ours, ids, mask, labels, False)
    assert rows == [(2, 6), (3, 5)]  # segments of 5 | 2, 1 behind one prompt, 3, 2 behind the other
    assert torch.equal(got.label_mask, expected.label_mask) and not got.label_mask[4].any()
    assert torch.allclose(got.log_probs, expected.log_probs, atol=1e-5)
    assert torch.allclose(got.entropy, expected.entropy, atol=1e-4)
    assert torch.allclose(got.loss, expected.loss, atol=1e-5)
    assert torch.allclose(grads, expected_grads, atol=1e-6, rtol=1e-4)
    with torch.no_grad():  # reference and old log-probs: no gradients, SDPA under the recipe's attention
        again = ours(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    assert torch.allclose(again.log_probs, expected.log_probs, atol=1e-5)


def test_activation_checkpointing_keeps_the_whole_rows(tokenizer):
    """Checkpointed layers drop a cache passed to them: the pass then runs every row whole, as before."""
    trl_model, ours = heads(tokenizer, 1.0)
    for m in (trl_model, ours):
        m.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        m.train()
    ids, mask, labels = grpo_batch(len(tokenizer))
    rows = decoder_calls(ours)
    expected, expected_grads = score(trl_model, ids, mask, labels, False)
    got, grads = score(ours, ids, mask, labels, False)
    assert rows == [(6, 12)]
    assert torch.allclose(got.log_probs, expected.log_probs, atol=1e-5)
    assert torch.allclose(grads, expected_grads, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_in_chunks_match_log_softmax(monkeypatch, temperature):
    """The chunked log-softmax (two sequences a chunk here) gives log_softmax's log-probs, entropy and
    gradient."""
    monkeypatch.setattr(completion_head, "CHUNK_ELEMENTS", 2 * 7 * 50)
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(5, 7, 50, generator=gen)).requires_grad_()
    targets = torch.randint(0, 50, (5, 7), generator=gen)
    weights = torch.randn(5, 7, generator=gen)
    picked, entropy = completion_head.token_logprobs().apply(logits, targets, temperature)
    (picked * weights).sum().backward()
    got_grad, logits.grad = logits.grad, None

    logp = torch.log_softmax(logits / temperature, dim=-1)
    expected = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    (expected * weights).sum().backward()
    assert torch.allclose(picked, expected, atol=1e-5)
    assert torch.allclose(entropy, -(logp.exp() * logp).sum(-1), atol=1e-5) and not entropy.requires_grad
    assert torch.allclose(got_grad, logits.grad, atol=1e-6)


def test_large_micro_batches_keep_trls_head(tokenizer, monkeypatch):
    # 10 logits: fewer than scored
    monkeypatch.setattr(completion_head, "host_memory_bytes", lambda: 10 * 16 * 4)
    trl_model, ours = heads(tokenizer, 1.0)
    ids, mask, labels = batch(len(tokenizer))
    expected, expected_grads = score(trl_model, ids, mask, labels, False)
    got, grads = score(ours, ids, mask, labels, False)
    assert torch.equal(got.log_probs, expected.log_probs) and torch.equal(grads, expected_grads)


def fast_beside_plain(tokenizer, precision: str, plain=None, prepare=None):
    """(plain, fast, accelerator, installed): `plain` (a tiny model by default), and a copy generating through
    fast_generation in `precision` (accelerate's mixed_precision) under a fresh accelerate state (as
    accelerate's own tests do), `prepare(fast)` called before, and the line it logged."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    plain = tiny_model(tokenizer, seed=2, hidden_size=64) if plain is None else plain
    fast = copy.deepcopy(plain)
    if prepare is not None:
        prepare(fast)
    accelerator = Accelerator(cpu=True, mixed_precision=precision)
    return plain, fast, accelerator, fast_generation.fast_generation(fast, accelerator)


def seven_prompts(tokenizer):
    """7 left-padded chat prompts of 3 kinds, as `generate` takes them."""
    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>assistant\n", "9"]
    return tokenizer((prompts * 3)[:7], return_tensors="pt", padding=True, padding_side="left")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("rows", [1, 2, 7])
def test_generation_is_unchanged(tokenizer, rows, precision):
    """Same greedy tokens with the fast paths installed (one autocast context, packed weights, the KV cache
    in buffers; in fp32 no autocast) at several batch sizes; the forward keeps the class's signature, from
    which `generate` decides to pass position_ids for left-padded prompts."""
    from trl.trainer.utils import add_fused_lm_head

    def heads(fast):  # as TRL and fast_paths install them
        add_fused_lm_head(fast, outputs=("log_probs", "entropy"))
        completion_logprob_head(fast, temperature=1.0)

    plain, fast, accelerator, installed = fast_beside_plain(tokenizer, precision, prepare=heads)
    assert installed == generation_line(precision)
    assert (
        inspect.signature(fast.forward).parameters.keys()
        == inspect.signature(plain.forward).parameters.keys()
    )
    plain = accelerator.prepare_model(plain, evaluation_mode=True)  # autocast entered at every forward

    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>assistant\n", "9"]
    enc = tokenizer((prompts * 3)[:rows], return_tensors="pt", padding=True, padding_side="left")
    kwargs = {"max_new_tokens": 80, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        expected = plain.generate(**enc, **kwargs)
        got = fast.generate(**enc, **kwargs)
    assert got.shape[1] > enc["input_ids"].shape[1] + 64  # past the cache's first buffer
    assert torch.equal(got, expected)
    assert not any("forward" in vars(m) for m in fast.model.modules())  # unpacked, the layers' forwards back
    # generated in inference mode, returned as a normal tensor: a training pass may save it for its backward
    assert not got.is_inference()
    fast(input_ids=got).logits.float().logsumexp(-1).mean().backward()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("do_sample", [False, True])
def test_ended_rows_leave_the_decoding_passes(tokenizer, precision, do_sample):
    """A row that has emitted an end-of-sequence token leaves the cache and the decoding passes, which then
    compute fewer rows: the same tokens as plain `generate`, greedy and sampled from one seed (the sampler
    draws for every row as before)."""
    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, precision)
    rows = decoder_calls(fast)
    enc = seven_prompts(tokenizer)
    # greedy: 5 rows repeat token 5 and end at once, 2 repeat 31 to the end; sampled: 10 of 101 tokens end
    # a row
    eos = [5] if do_sample is False else list(range(5, 15))
    kwargs = {"max_new_tokens": 24, "do_sample": do_sample, "top_k": 0, "eos_token_id": eos}
    kwargs["pad_token_id"] = tokenizer.pad_token_id
    with torch.no_grad():
        torch.manual_seed(3)
        got = fast.generate(**enc, **kwargs)
        torch.manual_seed(3)
        with accelerator.autocast():
            expected = plain.generate(**enc, **kwargs)
    assert torch.equal(got, expected)
    decoded = [r for r, columns in rows if columns == 1]  # the passes of one token a row
    ended = torch.isin(got[:, enc["input_ids"].size(1) :], torch.tensor(eos)).any(1)
    assert 0 < ended.sum() < 7 and got.size(1) == enc["input_ids"].size(1) + 24  # some rows ran to the end
    assert decoded[0] == 7 and min(decoded) == 7 - ended.sum() and decoded == sorted(decoded, reverse=True)
    assert not any("forward" in vars(m) for m in fast.modules())  # the model's forward is the class's again


@pytest.mark.parametrize("handed_in", ["static", "dynamic"])
def test_a_cache_handed_in_keeps_every_row(tokenizer, handed_in):
    """Rows leave only a cache fast_generate made for the call: static_cache.py's (grpo.cache_implementation
    =static) and a caller's keep every row, with the tokens of plain `generate`, as rows end."""
    from transformers import DynamicCache, GenerationConfig

    plain, fast, *_ = fast_beside_plain(tokenizer, "no")
    rows = decoder_calls(fast)
    enc = seven_prompts(tokenizer)
    greedy = {"max_new_tokens": 12, "do_sample": False, "eos_token_id": [5]}  # 5 of 7 rows end at once
    greedy["pad_token_id"] = tokenizer.pad_token_id
    if handed_in == "static":
        static_cache_generation(fast)
        cache, kwargs = None, {"generation_config": GenerationConfig(**greedy, cache_implementation="static")}
    else:
        cache, kwargs = DynamicCache(config=fast.config), {**greedy}
    with torch.no_grad():
        got = fast.generate(**enc, **kwargs, **({"past_key_values": cache} if cache else {}))
        expected = plain.generate(**enc, **greedy)
    assert torch.equal(got, expected)
    assert {r for r, columns in rows if columns == 1} == {7}  # every decoding pass: every row
    assert cache is None or cache.layers[0].keys.size(0) == 7


@pytest.mark.parametrize("precision", PRECISIONS)
def test_sampled_generation_of_several_sequences_a_prompt_decodes_on_packed_weights(
    tokenizer, monkeypatch, precision
):
    """pass@k asks `generate` for several samples a prompt: its decoding passes have prompts x samples rows,
    and take the packed weights too (they fell back to F.linear, reordering every weight at every token);
    the same seed draws the same tokens as plain `generate` under autocast."""
    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, precision)
    packed_calls, linear_pointwise = [], torch.ops.mkldnn._linear_pointwise

    def spy(x, *args):
        packed_calls.append(x.shape)
        return linear_pointwise(x, *args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n", "9"]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    kwargs = {"max_new_tokens": 8, "do_sample": True, "num_return_sequences": 3, "top_k": 0}
    kwargs["pad_token_id"] = tokenizer.pad_token_id
    with torch.no_grad():
        torch.manual_seed(5)
        got = fast.generate(**enc, **kwargs)
        torch.manual_seed(5)
        with accelerator.autocast():
            expected = plain.generate(**enc, **kwargs)
    assert got.shape[0] == 6 and torch.equal(got, expected)
    assert packed_calls and all(shape[0] == 6 for shape in packed_calls)  # 2 prompts x 3 samples a pass


@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_distinct_prompt_is_prefilled_once(tokenizer, precision):
    """GRPO's rows repeat each prompt: the prompt goes through the model once, the cache is expanded to its
    rows, and generation continues as from a prefill of every row (bf16 rounding apart)."""
    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, precision)
    rows, head_rows = decoder_calls(fast), []
    fast.lm_head.register_forward_pre_hook(lambda m, args: head_rows.append(args[0].shape[0]))
    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n", "<|im_start|>assistant\n"] * 3
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    kwargs.update(output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        got = fast.generate(**enc, **kwargs)
        with accelerator.autocast():
            expected = plain.generate(**enc, **kwargs)
    width = enc["input_ids"].shape[1]
    assert rows[:2] == [(2, width - 1), (6, 1)]  # the distinct prompts less their last token, then every row
    assert head_rows == [6] * 6  # the prefill's logits are not computed: one head pass a generated token
    assert torch.equal(got.sequences, expected.sequences)
    for a, b in zip(got.logits, expected.logits):
        assert torch.allclose(a, b, atol=0.05)


def test_a_static_cache_asked_for_is_made_once_and_generates_what_the_default_cache_does(
    tokenizer, monkeypatch
):
    """grpo.cache_implementation=static: under autocast an fp32 Llama's rotated keys come out fp32 and its
    values bf16, which transformers' own static cache cannot store (a step failed on it); the recipe's keeps
    both in bf16, is made once per shape and reset for the next call (the same tensors: a compiled decoding
    step replays its CUDA graphs), and greedy tokens are the default cache's."""
    from transformers import GenerationConfig, cache_utils

    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, "bf16")
    static_cache_generation(fast)  # as fast_paths.apply installs it, over fast_generate
    made, used = [], []

    class Counted(cache_utils.StaticCache):
        def __init__(self, *args, **kwargs):
            made.append(kwargs["max_cache_len"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cache_utils, "StaticCache", Counted)
    body = fast.get_decoder()
    body.register_forward_pre_hook(lambda m, a, kw: used.append(kw["past_key_values"]), with_kwargs=True)
    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n", "<|im_start|>assistant\n"] * 2
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    greedy = {"max_new_tokens": 20, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    config = GenerationConfig(**greedy, cache_implementation="static", disable_compile=True)  # as TRL's
    with torch.no_grad():
        with accelerator.autocast():
            expected = plain.generate(**enc, **greedy)
        first = fast.generate(**enc, generation_config=config)
        second = fast.generate(**enc, generation_config=config)
    assert torch.equal(first, expected) and torch.equal(second, expected)
    assert made == [128]  # prompt + 20 tokens, rounded up to CACHE_LENGTH_STEP; the second call reuses it
    assert {id(c) for c in used} == {id(used[0])} and type(used[0]) is Counted
    assert {layer.keys.dtype for layer in used[0].layers} == {torch.bfloat16}
    assert config.cache_implementation == "static"  # the caller's config is left as it was

    # One cache a row count, replaced only by a longer one: 120 new tokens need 256 positions, then 20 fit
    longer = GenerationConfig(**{**greedy, "max_new_tokens": 120}, cache_implementation="static")
    with torch.no_grad():
        fast.generate(**enc, generation_config=longer)
        assert torch.equal(fast.generate(**enc, generation_config=config), expected)
        # keywords alone (no config), 3 samples a prompt: 12 rows, another cache
        sampled = fast.generate(
            **enc, **{**greedy, "do_sample": True}, num_return_sequences=3, cache_implementation="static"
        )
    assert made == [128, 256, 128] and sampled.shape[0] == 12
    assert used[-1].layers[0].keys.shape[0] == 12


def test_a_static_cache_the_recipe_cannot_hold_falls_back_to_the_dynamic_one_and_says_so(
    tokenizer, monkeypatch, caplog
):
    """Layers of another kind (sliding windows, ...): transformers' own static cache would fail under autocast
    as above, so generate falls back to its default cache, with one warning."""
    from transformers import GenerationConfig, cache_utils

    class Sliding(cache_utils.StaticCache):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.layers = [cache_utils.StaticSlidingWindowLayer(8, 4) for _ in self.layers]

    monkeypatch.setattr(cache_utils, "StaticCache", Sliding)
    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, "bf16")
    static_cache_generation(fast)
    enc = tokenizer(["9", "<|im_start|>assistant\n"], return_tensors="pt", padding=True, padding_side="left")
    greedy = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    config = GenerationConfig(**greedy, cache_implementation="static", disable_compile=True)
    with torch.no_grad():
        with accelerator.autocast():
            expected = plain.generate(**enc, **greedy)
        got = [fast.generate(**enc, generation_config=config) for _ in range(2)]
    assert all(torch.equal(g, expected) for g in got)
    said = [r.message for r in caplog.records if "cache_implementation=static" in r.message]
    expected_line = (
        "grpo.cache_implementation=static: LlamaForCausalLM has layers of another kind (sliding windows, "
        "...), which the recipe's static cache does not hold: generating with the default cache"
    )
    assert said == [expected_line]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_model_that_is_its_own_decoder_is_prefilled_with_one_position_of_logits(tokenizer, precision):
    """transformers' get_decoder returns the model itself for some (Mllama): the prefill then keeps one
    position's logits, and generation is unchanged."""

    def own_decoder(fast):
        fast.get_decoder = lambda: fast

    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, precision, prepare=own_decoder)
    head_rows = []
    fast.lm_head.register_forward_pre_hook(lambda m, args: head_rows.append(tuple(args[0].shape[:2])))
    enc = tokenizer(["<|im_start|>user\n12+7?<|im_end|>\n"] * 3, return_tensors="pt", padding=True)
    kwargs = {"max_new_tokens": 4, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        got = fast.generate(**enc, **kwargs)
        with accelerator.autocast():
            expected = plain.generate(**enc, **kwargs)
    assert head_rows[0] == (1, 1) and head_rows[1:] == [(3, 1)] * 4  # the prefill: one prompt, one position
    assert torch.equal(got, expected)


@NEEDS_BF16_PACKING
def test_packed_linears_compute_what_f_linear_computes():
    """Decoding-shaped calls (one row a sequence) take the packed weights, bit for bit F.linear's result
    under autocast; other shapes (the prefill) and the weights after the context are F.linear's own."""
    layer = torch.nn.Linear(48, 40, bias=True)
    x = torch.randn(6, 1, 48)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, expected_prefill = (
            layer(x),
            layer(torch.randn(6, 5, 48, generator=torch.Generator().manual_seed(1))),
        )
        with packed_decoding.packed_linears(layer, rows=6, cast=torch.bfloat16):
            assert "forward" in vars(layer)
            got = layer(x)
            prefill = layer(torch.randn(6, 5, 48, generator=torch.Generator().manual_seed(1)))
    assert got.dtype == expected.dtype == torch.bfloat16
    assert torch.equal(got, expected) and torch.equal(prefill, expected_prefill)
    assert "forward" not in vars(layer)


def test_packed_fp32_linears_compute_f_linear_within_fp32_rounding():
    """In fp32 (no autocast) the packed weight is the weight itself, reordered: oneDNN's GEMM, within fp32
    rounding of F.linear's (MKL's); the prefill's shapes keep F.linear."""
    layer = torch.nn.Linear(576, 960, bias=False)
    x, prompt = torch.randn(16, 1, 576), torch.randn(16, 5, 576)
    expected, expected_prefill = layer(x), layer(prompt)
    with torch.no_grad(), packed_decoding.packed_linears(layer, rows=16):
        assert "forward" in vars(layer)  # packed
        got, prefill = layer(x), layer(prompt)
    assert got.dtype == torch.float32 and torch.equal(prefill, expected_prefill)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_linear_whose_forward_was_replaced_keeps_it(tokenizer):
    """TRL's `cast_lm_head_to_fp32` replaces the LM head's forward on the instance: packing leaves that
    Linear alone, and its forward is still TRL's after `generate`."""
    calls, replaced = [], []

    def fp32_head(fast):  # as cast_lm_head_to_fp32 replaces it
        head = fast.lm_head
        head.forward = lambda x: (
            calls.append(x.shape) or torch.nn.functional.linear(x.float(), head.weight.float())
        )
        replaced.append(head.forward)

    _, fast, *_ = fast_beside_plain(tokenizer, "no", prepare=fp32_head)
    head = fast.lm_head
    enc = tokenizer(["9", "9"], return_tensors="pt")
    with torch.no_grad():
        fast.generate(**enc, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert vars(head)["forward"] is replaced[0] and len(calls) >= 3  # every pass through TRL's head


def test_bf16_weights_without_autocast_decode_in_bf16_or_say_why_not(tokenizer):
    """bf16 weights and no autocast (model.dtype=bf16, grpo.bf16=false): packed as bf16 where oneDNN packs
    bf16, else unpacked with the reason; the greedy tokens of plain `generate` either way."""
    bf16 = tiny_model(tokenizer, seed=2, hidden_size=64).to(torch.bfloat16)
    plain, fast, _, installed = fast_beside_plain(tokenizer, "no", plain=bf16)
    if PACKS_BF16:
        assert installed == "generation without autocast, on packed bf16 weights, q/k/v in one GEMM"
    else:
        assert installed == (
            "generation without autocast, packed weights off: oneDNN has no bf16 GEMM on this CPU "
            "(no AVX-512 or AMX)"
        )
    enc = tokenizer(["<|im_start|>user\n12+7?<|im_end|>\n", "9"], return_tensors="pt", padding=True)
    kwargs = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        assert torch.equal(fast.generate(**enc, **kwargs), plain.generate(**enc, **kwargs))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("do_sample", [False, True])
def test_llama_layers_decode_q_k_v_in_one_packed_gemm(tokenizer, monkeypatch, do_sample, precision):
    """A Llama decoder layer's decoding pass computes q, k and v in one GEMM on their stacked packed weights
    (and no GEMM of their own): the same tokens as plain `generate` (under autocast), greedy and, from one
    seed, sampled; in bf16 the same scores bit for bit, in fp32 within its rounding. A layer's forward set
    before (compile_layers') is back after."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = tiny_model(tokenizer, hidden_size=64).config.to_dict() | {"intermediate_size": 192}
    torch.manual_seed(3)
    llama = LlamaForCausalLM(LlamaConfig(**config))  # its MLP's 192 columns apart from q/k/v's 128
    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, precision, plain=llama)
    compiled = functools.partial(type(fast.model.layers[0]).forward, fast.model.layers[0])
    fast.model.layers[0].forward = compiled
    columns, linear_pointwise = [], torch.ops.mkldnn._linear_pointwise

    def spy(x, packed, *args):
        columns.append(packed.size(0))
        return linear_pointwise(x, packed, *args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n<|im_start|>assistant\n", "9", "<|im_start|>assistant\n"]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    kwargs = {
        "max_new_tokens": 12,
        "do_sample": do_sample,
        "top_k": 0,
        "pad_token_id": tokenizer.pad_token_id,
    }
    kwargs |= {"output_scores": True, "return_dict_in_generate": True}
    with torch.no_grad():
        torch.manual_seed(7)
        got = fast.generate(**enc, **kwargs)
        torch.manual_seed(7)
        with accelerator.autocast():
            expected = plain.generate(**enc, **kwargs)
    assert torch.equal(got.sequences, expected.sequences)
    if precision == "bf16":
        assert all(torch.equal(a, b) for a, b in zip(got.scores, expected.scores, strict=True))
    else:  # oneDNN's fp32 GEMM against MKL's: within fp32 rounding
        for a, b in zip(got.scores, expected.scores, strict=True):
            torch.testing.assert_close(a, b)
    config = plain.config  # q, k and v stacked: 2 query heads of 32 and 1 key/value head of 32
    stacked = (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim
    passes = got.sequences.size(1) - enc["input_ids"].size(1) - 1  # the first token comes from the prefill
    assert columns.count(stacked) == passes * config.num_hidden_layers
    assert config.num_key_value_heads * config.head_dim not in columns  # no k or v GEMM of their own
    assert vars(fast.model.layers[0])["forward"] is compiled and "forward" not in vars(fast.model.layers[1])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_layers_decoding_layer_cannot_reproduce_keep_q_k_v_apart_and_say_so(tokenizer, precision):
    """q, k and v with biases (or any layer but transformers' Llama one) keep their own packed GEMMs, the same
    tokens as plain `generate`, and the install line says why."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = tiny_model(tokenizer, hidden_size=64).config.to_dict() | {"attention_bias": True}
    torch.manual_seed(0)
    biased = LlamaForCausalLM(LlamaConfig(**config))
    plain, fast, accelerator, installed = fast_beside_plain(tokenizer, precision, plain=biased)
    assert installed.endswith(
        "q/k/v in one GEMM off: not transformers' Llama layers with bias-free q/k/v (LlamaDecoderLayer)"
    )
    enc = tokenizer(["9", "<|im_start|>assistant\n"], return_tensors="pt", padding=True, padding_side="left")
    kwargs = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        got = fast.generate(**enc, **kwargs)
        with accelerator.autocast():
            expected = plain.generate(**enc, **kwargs)
    assert torch.equal(got, expected)


def test_buffered_cache_keeps_what_dynamic_cache_keeps(tokenizer):
    """The same keys and values as DynamicCache (cast to the cache's dtype), across buffer growth, a crop and
    a batch selection (Cache methods that replace or shrink the keys)."""
    from transformers.cache_utils import DynamicCache

    model = tiny_model(tokenizer, seed=2, hidden_size=64)
    ours, plain = fast_generation.buffered_cache(model, torch.bfloat16), DynamicCache(config=model.config)
    gen = torch.Generator().manual_seed(0)
    for step, tokens in enumerate([5, 1, 60, 1, 1]):
        k, v = (torch.randn(3 if step <= 2 else 2, 2, tokens, 16, generator=gen) for _ in range(2))
        got = ours.update(k, v, layer_idx=0)
        plain.update(k, v, layer_idx=0)
        assert torch.equal(got[0], plain.layers[0].keys.bfloat16()) and got[0].dtype == torch.bfloat16
        assert torch.equal(got[1], plain.layers[0].values.bfloat16())
        if step == 2:
            for cache in (ours, plain):
                cache.crop(-4)
                cache.batch_select_indices(torch.tensor([2, 0]))
    assert ours.get_seq_length() == plain.get_seq_length() == 5 + 1 + 60 - 4 + 2


def test_decode_attention_is_sdpas_within_bf16_rounding():
    """One query a sequence over grouped key/value heads and left padding: SDPA's output, layout and all,
    within bf16 rounding (SDPA's CPU kernel scores in fp32, decode_attention in bf16 as autocast ran it)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    torch.manual_seed(0)
    batch, kv_heads, length, dim = 5, 2, 37, 16
    query = torch.randn(batch, 3 * kv_heads, 1, dim).bfloat16()
    key, value = (torch.randn(batch, kv_heads, length, dim).bfloat16() for _ in range(2))
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[1, ..., :9] = mask[3, ..., :30] = False  # left padding
    for m in (mask, None):
        got, _ = attention.decode_attention(module, query, key, value, m, scaling=0.3)
        expected, _ = sdpa_attention_forward(module, query, key, value, m, scaling=0.3)
        assert got.shape == expected.shape == (batch, 1, 3 * kv_heads, dim) and got.dtype == torch.bfloat16
        assert (got.float() - expected.float()).abs().max() < 0.02 * expected.float().abs().max()
    padded = value.clone()
    padded[3, :, :30] = 1e4  # masked positions weigh nothing
    assert torch.equal(
        attention.decode_attention(module, query, key, padded, mask)[0][3],
        attention.decode_attention(module, query, key, value, mask)[0][3],
    )


def test_decode_attention_only_where_generate_samples(tokenizer, monkeypatch):
    """The recipe's attention takes decode_attention in the decoding passes of a sampling `generate` only:
    greedy generation (the fixed eval) keeps SDPA, token for token the plain model's."""
    plain, fast, accelerator, _ = fast_beside_plain(tokenizer, "bf16")
    assert attention.recipe_attention(fast) is None
    calls = []
    decode = attention.decode_attention
    monkeypatch.setattr(
        attention, "decode_attention", lambda *a, **kw: calls.append(a[1].shape) or decode(*a, **kw)
    )
    enc = tokenizer(
        ["<|im_start|>user\n12+7?<|im_end|>\n", "9"], return_tensors="pt", padding=True, padding_side="left"
    )
    kwargs = {"max_new_tokens": 6, "min_new_tokens": 6, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        greedy = fast.generate(**enc, do_sample=False, **kwargs)
        assert calls == []
        with accelerator.autocast():
            assert torch.equal(greedy, plain.generate(**enc, do_sample=False, **kwargs))
        fast.generate(**enc, do_sample=True, top_k=0, **kwargs)
    layers = plain.config.num_hidden_layers
    # the prompts' pass (distinct prompts: no prefill) is SDPA's; each of the 5 later passes, one query a row
    assert len(calls) == 5 * layers and all(shape[0] == 2 and shape[2] == 1 for shape in calls)
    assert not attention.SAMPLING.get()  # reset when generate returns


def next_token_logprobs(model, ids, mask):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def test_eager_attention_for_gradients(tokenizer):
    """Passes with gradients attend with eager matmuls, within bf16 rounding of SDPA; passes without
    (generation, evals, reference log-probs) are SDPA's, bit for bit."""
    plain = tiny_model(tokenizer, seed=2, hidden_size=64)
    assert plain.config._attn_implementation == "sdpa"
    ours = copy.deepcopy(plain)
    assert attention.recipe_attention(ours) is None
    ids, mask, _ = batch(len(tokenizer))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            assert torch.equal(
                ours(input_ids=ids, attention_mask=mask).logits,
                plain(input_ids=ids, attention_mask=mask).logits,
            )
        got, expected = (next_token_logprobs(m, ids, mask) for m in (ours, plain))
    scored = (mask[:, 1:] & mask[:, :-1]).bool()  # real tokens after a real token: what a loss reads
    assert (got - expected)[scored].abs().max() < 0.02  # bf16 rounding of the attention scores
    advantages = torch.linspace(-1, 1, got.size(1))
    for logprobs in (got, expected):
        (logprobs * advantages).masked_fill(~scored, 0).sum().backward()
    grads = [torch.cat([p.grad.flatten() for p in m.parameters()]) for m in (ours, plain)]
    assert torch.nn.functional.cosine_similarity(*grads, dim=0) > 0.999
    assert "eager" not in ours.config.to_json_string()  # the registered name is not saved with the model


def test_long_sequences_keep_sdpa_with_gradients(tokenizer, monkeypatch):
    """Eager attention keeps its probabilities for the backward (O(length^2) a layer): past
    EAGER_ATTENTION_BYTES (all layers; one under activation checkpointing) a pass with gradients attends
    with SDPA, bit for bit the plain model's."""
    plain = tiny_model(tokenizer, seed=2, hidden_size=64)
    ours = copy.deepcopy(plain)
    assert attention.recipe_attention(ours) is None
    ids, mask, _ = batch(len(tokenizer))
    b, n = ids.shape
    heads, layers = plain.config.num_attention_heads, plain.config.num_hidden_layers
    one_layer = b * n * n * 6 * heads  # bytes of one layer's kept probabilities
    for budget, checkpointed, eager in [
        (one_layer * layers, False, True),
        (one_layer * layers - 1, False, False),
        (one_layer, True, True),  # checkpointed: one layer's at a time
    ]:
        monkeypatch.setattr(attention, "EAGER_ATTENTION_BYTES", budget)
        if checkpointed:
            ours.activation_checkpointing_enable({"use_reentrant": False})
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, expected = (m(input_ids=ids, attention_mask=mask).logits for m in (ours, plain))
        assert torch.equal(got, expected) is not eager, budget


def test_passes_without_gradients_skip_the_attention_budget(tokenizer, monkeypatch):
    """The budget asks `is_activation_checkpointing`, a walk over every module (~2 ms on the embedded
    model): only passes with gradients may attend eagerly, so decode and eval passes never ask it."""
    ours = tiny_model(tokenizer, seed=2, hidden_size=64)
    assert attention.recipe_attention(ours) is None
    asked = []
    walk = type(ours).is_activation_checkpointing
    monkeypatch.setattr(
        type(ours), "is_activation_checkpointing", property(lambda m: asked.append(1) or walk.fget(m))
    )
    ids, mask, _ = batch(len(tokenizer))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            ours(input_ids=ids, attention_mask=mask)
        assert asked == []
        ours(input_ids=ids, attention_mask=mask)
    assert len(asked) == 1  # once a pass with gradients, not once a layer


def grpo_trainer(tokenizer, tmp_path, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = {"activation_checkpointing": True, **config}  # TRL's GRPO default, by its current name
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=PACKS_BF16,  # the precision whose generation packs here
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        report_to="none",
        **config,
    )
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}]}] * 4)
    model = tiny_model(tokenizer, seed=3)
    model.save_pretrained(tmp_path / "tiny")  # TRL loads the reference model (beta > 0) from the model's path
    model.config._name_or_path = str(tmp_path / "tiny")
    return GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
    )


def test_apply_installs_what_fits_the_trainer(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(fast_paths, "matmuls_faster_at_one_query", lambda model: True)  # as on an AMD EPYC
    trainer = grpo_trainer(tokenizer, tmp_path)
    precision = "bf16" if PACKS_BF16 else "no"
    assert fast_paths.install(trainer) == [
        generation_line(precision),
        "completion-only log-prob head",
        (
            "each distinct prompt once, completions packed in the training passes off: activation "
            "checkpointing is on"
        ),
        "eager attention with gradients, matmuls in sampled decoding",
        "decoder layers compiled for the training passes off: activation checkpointing is on",
    ]
    # our head over TRL's
    assert trainer.model.forward.__func__.__code__.co_filename == completion_head.__file__
    with_reference = grpo_trainer(tokenizer, tmp_path, beta=0.04)  # TRL keeps a reference model
    assert "completion-only log-prob head" in fast_paths.install(with_reference)
    assert with_reference.ref_model.forward.__func__.__code__.co_filename == completion_head.__file__
    assert fast_paths.install(grpo_trainer(tokenizer, tmp_path, entropy_coef=0.01)) == [
        generation_line(precision),
        "completion-only log-prob head off: the entropy bonus needs TRL's head",
        (
            "each distinct prompt once, completions packed in the training passes off: the completion-only "
            "head is off"
        ),
        "eager attention with gradients, matmuls in sampled decoding",
        "decoder layers compiled for the training passes off: activation checkpointing is on",
    ]  # each speed-up that cannot apply says why
    # A model TRL did not patch is left alone.
    assert completion_head.completion_logprob_head(tiny_model(tokenizer), temperature=1.0) is False


def test_sampled_decoding_attends_with_the_faster_kernel_here(tokenizer, tmp_path, monkeypatch):
    """Which of SDPA and decode_attention is faster at one query depends on the CPU: timed once at install,
    on the model's heads, and the log line says which decodes; where SDPA wins, decode_attention never
    runs."""
    model, state = tiny_model(tokenizer), torch.get_rng_state()
    assert attention.matmuls_faster_at_one_query(model) in (True, False)
    assert torch.equal(torch.get_rng_state(), state)  # the run's seeded draws are left as they were
    monkeypatch.setattr(fast_paths, "matmuls_faster_at_one_query", lambda model: False)  # as on a Xeon
    trainer = grpo_trainer(tokenizer, tmp_path)
    line = "eager attention with gradients, SDPA (faster here than matmuls) in sampled decoding"
    assert fast_paths.install(trainer)[3] == line
    monkeypatch.setattr(attention, "decode_attention", lambda *a, **kw: pytest.fail("matmuls ran"))
    enc = tokenizer(["12+7?", "9"], return_tensors="pt", padding=True, padding_side="left")
    with torch.no_grad():
        trainer.model.generate(**enc, do_sample=True, max_new_tokens=4, pad_token_id=tokenizer.pad_token_id)


def test_a_fast_path_that_cannot_apply_says_why(tokenizer, tmp_path):
    """A forward wrapped without functools.wraps (a profiler, a user's hook) hides TRL's head: the log line
    says so, and `true` refuses; a model on eager attention keeps it, and says so."""
    trainer = grpo_trainer(tokenizer, tmp_path)
    forward = trainer.model.forward
    trainer.model.forward = lambda *args, **kwargs: forward(*args, **kwargs)
    trainer.model.config._attn_implementation = "eager"
    assert fast_paths.install(trainer)[1:4] == [
        "completion-only log-prob head off: TRL's fused LM head was not found",
        (
            "each distinct prompt once, completions packed in the training passes off: the completion-only "
            "head is off"
        ),
        "eager attention with gradients, matmuls in sampled decoding off: attention is eager, not sdpa",
    ]
    with pytest.raises(ConfigError, match="grpo.fast_paths=true: TRL's fused LM head was not found"):
        fast_paths.install(trainer, strict=True)


def test_generation_that_cannot_pack_says_why_and_true_refuses(tokenizer, tmp_path, monkeypatch):
    """A CPU run whose torch cannot pack (no oneDNN): `auto` generates unpacked and says so, `true` refuses
    before installing anything."""
    monkeypatch.setattr(fast_paths, "packed_weights_off", lambda accelerator, dtype: "no oneDNN here")
    monkeypatch.setattr(fast_generation, "packed_weights_off", lambda accelerator, dtype: "no oneDNN here")
    trainer = grpo_trainer(tokenizer, tmp_path)
    with pytest.raises(ConfigError, match="grpo.fast_paths=true: packed weights off: no oneDNN here"):
        fast_paths.install(trainer, strict=True)
    assert not getattr(trainer.model.generate, "_fast", False)
    where = "generation under one autocast context" if PACKS_BF16 else "generation without autocast"
    assert fast_paths.install(trainer)[0] == f"{where}, packed weights off: no oneDNN here"


def test_the_pinned_trl_is_the_one_the_fast_paths_were_written_for():
    """Fails on a TRL upgrade: re-check what the fast paths stand in for, then update TESTED_TRL (with
    `grpo.fast_paths: auto` they switch themselves off meanwhile)."""
    import trl

    assert trl.__version__ in fast_paths.TESTED_TRL


def test_the_switch_and_the_version_guard(tokenizer, tmp_path, monkeypatch):
    import trl

    trainer = grpo_trainer(tokenizer, tmp_path)
    assert fast_paths.apply(trainer, False) == "off (grpo.fast_paths=false)"
    assert not getattr(trainer.model.generate, "_fast", False)  # nothing installed
    monkeypatch.setattr(trl, "__version__", "99.0.0")
    assert fast_paths.apply(trainer, "auto") == "off: written for TRL 1.16.0, TRL 99.0.0 is installed"
    assert not getattr(trainer.model.generate, "_fast", False)
    with pytest.raises(ConfigError, match="grpo.fast_paths=true: written for TRL 1.16.0, TRL 99.0.0 is"):
        fast_paths.apply(trainer, True)  # true refuses what auto falls back from
    assert not getattr(trainer.model.generate, "_fast", False)


# TRL 1.16's generation unwrapping asks the deprecated name (a run filters it: run.ignore_trl_deprecations)
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_static_cache_asked_for_is_installed_with_the_fast_paths_off_and_a_step_trains(tokenizer, tmp_path):
    """grpo.cache_implementation=static with grpo.fast_paths=false: TRL's generate still gets the recipe's
    static cache (transformers' own stopped the first step under autocast), the log line says so, and a
    training step runs."""
    trainer = grpo_trainer(
        tokenizer, tmp_path, cache_implementation="static", max_steps=1, activation_checkpointing=False
    )
    said = fast_paths.apply(trainer, False)
    assert (
        said == "off (grpo.fast_paths=false), a static KV cache (not compiled on a CPU; each distinct "
        "prompt's own prefill off)"
    )
    assert getattr(trainer.model.generate, "_static", False) and not getattr(
        trainer.model.generate, "_fast", 0
    )
    caches = []  # the cache each model pass of the step's generation got
    trainer.model.get_decoder().register_forward_pre_hook(
        lambda m, a, kw: caches.append(type(kw.get("past_key_values")).__name__), with_kwargs=True
    )
    trainer.train()
    assert trainer.state.global_step == 1
    assert "StaticCache" in caches  # TRL's generate ran on the recipe's cache


def test_compiled_layers_match_eager_within_bf16_rounding(tokenizer):
    """`grpo.compile_layers`: passes with gradients run the compiled layers (one compile for every layer and
    length), within bf16 rounding of eager; passes without stay eager, bit for bit, and compile nothing."""
    plain = tiny_model(tokenizer, seed=2, hidden_size=64)
    ours = copy.deepcopy(plain)
    assert fast_paths.compile_decoder_layers(ours) == plain.config.num_hidden_layers
    ids, mask, _ = batch(len(tokenizer))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, expected = (next_token_logprobs(m, ids, mask) for m in (ours, plain))
        scored = (mask[:, 1:] & mask[:, :-1]).bool()
        assert (got - expected)[scored].abs().max() < 0.02  # fused kernels round differently in bf16
        assert not torch.equal(got, expected)  # so these came from the compiled kernels
        advantages = torch.linspace(-1, 1, got.size(1))
        losses = [(lp * advantages).masked_fill(~scored, 0).sum() for lp in (got, expected)]
        torch.testing.assert_close(*losses, atol=0.05, rtol=0.01)
        for loss in losses:
            loss.backward()
        grads = [torch.cat([p.grad.flatten() for p in m.parameters()]) for m in (ours, plain)]
        assert torch.nn.functional.cosine_similarity(*grads, dim=0) > 0.999
        with torch.compiler.set_stance("fail_on_recompile"):  # raises if anything below compiled again
            with torch.no_grad():
                assert torch.equal(
                    ours(input_ids=ids, attention_mask=mask).logits,
                    plain(input_ids=ids, attention_mask=mask).logits,
                )
            longer = torch.cat([ids, ids[:, :3]], dim=1), torch.cat([mask, mask[:, :3]], dim=1)
            next_token_logprobs(ours, *longer).sum().backward()  # another length: the same graph


def test_compile_layers_where_it_pays_and_true_refuses(tokenizer, tmp_path, monkeypatch):
    """`auto` compiles a CPU run of 100+ steps of a 100M+ model without activation checkpointing, and says
    why not otherwise; `true` compiles a short run too, and refuses where auto goes without."""
    checkpointed = grpo_trainer(tokenizer, tmp_path, max_steps=200)
    assert fast_paths.install(checkpointed)[-1] == (
        "decoder layers compiled for the training passes off: activation checkpointing is on"
    )
    with pytest.raises(ConfigError, match="grpo.compile_layers=true: activation checkpointing is on"):
        fast_paths.layers_not_compiled(checkpointed, True)
    short = grpo_trainer(tokenizer, tmp_path, activation_checkpointing=False, max_steps=40)
    why = "auto compiles runs of max_steps >= 100 on models of 100M+ parameters (the compile takes ~30 s)"
    assert fast_paths.layers_not_compiled(short, "auto") == why
    assert fast_paths.layers_not_compiled(short, False) == "grpo.compile_layers=false"
    assert not any(isinstance(m.forward, functools.partial) for m in short.model.modules())
    assert fast_paths.layers_not_compiled(short, True) is None
    assert sum(isinstance(m.forward, functools.partial) for m in short.model.modules()) == 2
    long = grpo_trainer(tokenizer, tmp_path, activation_checkpointing=False, max_steps=100)
    assert fast_paths.layers_not_compiled(long, "auto") == why  # the tiny model: it would not pay back
    monkeypatch.setattr(fast_paths, "COMPILE_FROM_PARAMETERS", 0)  # as large as the embedded model
    assert fast_paths.install(long)[-1] == "decoder layers compiled for the training passes"
    long.args.compile_layers = True  # (a recipe's GRPOConfig field) with every fast path off: refused
    with pytest.raises(
        ConfigError, match=r"compile_layers=true: the fast paths are off \(grpo.fast_paths=false"
    ):
        fast_paths.apply(long, False)


def test_without_a_working_compiler_the_layers_stay_eager_and_say_why(tokenizer, tmp_path, monkeypatch):
    def no_compiler(fn, **kwargs):
        def call(*args):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

        return call

    monkeypatch.setattr(torch, "compile", no_compiler)
    monkeypatch.setattr(fast_paths, "COMPILE_FROM_PARAMETERS", 0)
    trainer = grpo_trainer(tokenizer, tmp_path, activation_checkpointing=False, max_steps=100)
    why = "torch.compile is unavailable (RuntimeError: InvalidCxxCompiler: No working C++ compiler found)"
    assert fast_paths.layers_not_compiled(trainer, "auto") == why
    assert not any(isinstance(m.forward, functools.partial) for m in trainer.model.modules())
    with pytest.raises(ConfigError, match="grpo.compile_layers=true: torch.compile is unavailable"):
        fast_paths.layers_not_compiled(trainer, True)
