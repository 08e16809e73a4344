"""The fast paths change speed, never results: same log-probs and gradients as TRL's head, same tokens."""

import copy
import inspect

import pytest
import torch

from grpo_common.errors import ConfigError
from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer
from grpo_recipes.train import fast_paths
from grpo_recipes.train.fast_paths import completion_logprob_head, generate_with_cached_casts


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


def heads(tokenizer, temperature, max_logits=None):
    from trl.trainer.utils import add_fused_lm_head

    trl_model = tiny_model(tokenizer, seed=1, hidden_size=64)
    ours = copy.deepcopy(trl_model)
    for m in (trl_model, ours):
        add_fused_lm_head(m, temperature=temperature, outputs=("log_probs", "entropy"))
    kwargs = {} if max_logits is None else {"max_logits": max_logits}
    completion_logprob_head(ours, temperature=temperature, **kwargs)
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


def test_large_micro_batches_keep_trls_head(tokenizer):
    trl_model, ours = heads(tokenizer, 1.0, max_logits=10)  # fewer logits than the batch scores
    ids, mask, labels = batch(len(tokenizer))
    expected, expected_grads = score(trl_model, ids, mask, labels, False)
    got, grads = score(ours, ids, mask, labels, False)
    assert torch.equal(got.log_probs, expected.log_probs) and torch.equal(grads, expected_grads)


def test_generation_is_unchanged(tokenizer):
    """Same greedy tokens with both fast paths installed; the forward keeps the class's signature,
    from which `generate` decides to pass position_ids for left-padded prompts."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from trl.trainer.utils import add_fused_lm_head

    AcceleratorState._reset_state(
        reset_partial_state=True
    )  # as accelerate's own tests do: a fresh bf16 state
    plain = tiny_model(tokenizer, seed=2, hidden_size=64)
    fast = copy.deepcopy(plain)
    add_fused_lm_head(fast, outputs=("log_probs", "entropy"))
    completion_logprob_head(fast, temperature=1.0)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    generate_with_cached_casts(fast, accelerator)
    assert (
        inspect.signature(fast.forward).parameters.keys()
        == inspect.signature(plain.forward).parameters.keys()
    )
    plain = accelerator.prepare_model(plain, evaluation_mode=True)  # autocast entered at every forward

    prompts = ["<|im_start|>user\n12+7?<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>assistant\n"]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    kwargs = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": tokenizer.pad_token_id}
    with torch.no_grad():
        expected = plain.generate(**enc, **kwargs)
        got = fast.generate(**enc, **kwargs)
    assert torch.equal(got, expected)


def grpo_trainer(tokenizer, tmp_path, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = {"activation_checkpointing": True, **config}  # TRL's GRPO default, by its current name
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=True,
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


def test_apply_installs_what_fits_the_trainer(tokenizer, tmp_path):

    trainer = grpo_trainer(tokenizer, tmp_path)
    assert fast_paths.install(trainer) == [
        "generation under one autocast context",
        "completion-only log-prob head",
    ]
    assert trainer.model.forward.__func__.__code__.co_filename == fast_paths.__file__  # our head over TRL's
    with_reference = grpo_trainer(tokenizer, tmp_path, beta=0.04)  # TRL keeps a reference model
    assert "completion-only log-prob head" in fast_paths.install(with_reference)
    assert with_reference.ref_model.forward.__func__.__code__.co_filename == fast_paths.__file__
    assert fast_paths.install(grpo_trainer(tokenizer, tmp_path, entropy_coef=0.01)) == [
        "generation under one autocast context",
        "completion-only log-prob head off: the entropy bonus needs TRL's head",
    ]  # each speed-up that cannot apply says why
    # A model TRL did not patch is left alone.
    assert fast_paths.completion_logprob_head(tiny_model(tokenizer), temperature=1.0) is False


def test_the_pinned_trl_is_the_one_the_fast_paths_were_written_for():
    """Fails on a TRL upgrade: re-check what the fast paths stand in for, then update TESTED_TRL (with
    `grpo.fast_paths: auto` they switch themselves off meanwhile)."""
    import trl

    assert trl.__version__ in fast_paths.TESTED_TRL


def test_the_switch_and_the_version_guard(tokenizer, tmp_path, monkeypatch):
    import trl

    trainer = grpo_trainer(tokenizer, tmp_path)
    assert fast_paths.apply(trainer, False) == "off (grpo.fast_paths=false)"
    assert not getattr(trainer.model.generate, "_cached_casts", False)  # nothing installed
    monkeypatch.setattr(trl, "__version__", "99.0.0")
    assert fast_paths.apply(trainer, "auto") == "off: written for TRL 1.16.0, TRL 99.0.0 is installed"
    assert not getattr(trainer.model.generate, "_cached_casts", False)
    with pytest.raises(ConfigError, match="grpo.fast_paths=true: written for TRL 1.16.0, TRL 99.0.0 is"):
        fast_paths.apply(trainer, True)  # true refuses what auto falls back from
    assert not getattr(trainer.model.generate, "_cached_casts", False)
