"""kl_sample_train_v1/v2 and ac_tokens_per_turn: ~0 when the sampler and the learner are the same fp32
model, clearly > 0 when they are not; ac_tokens_per_turn is the batch's mean completion length."""

import pytest
import torch

from grpo_recipes.train import fast_paths
from grpo_recipes.train.sampling_kl import (
    SAMPLING_LOGPS,
    SamplingKLTrainer,
    sample_train_metrics,
    sample_train_sums,
)
from tests.conftest import tiny_trainer

# TRL 1.16 calls transformers' deprecated alias on every generation (as run.py, this one warning only).
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
PROMPTS = [f"{i}+{i}?" for i in range(8)]


def constant_reward(completions, **kwargs):
    return [0.0] * len(completions)


def scored_batch(trainer):
    batch = [trainer.train_dataset[i] for i in [0, 0, 0, 0, 1, 1, 1, 1]]
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(batch)


def logged(trainer, name):
    return trainer._metrics["train"][name][-1]


def test_sums_and_metrics_by_hand():
    nan = float("nan")
    sampling = torch.tensor([[-1.0, -2.0, nan], [-0.5, nan, nan]])
    training = torch.tensor([[-1.5, -1.0, -9.0], [-0.5, -9.0, -9.0]])
    loss_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    metrics = sample_train_metrics(sample_train_sums(sampling, training, loss_mask))
    assert metrics["sampling/kl_sample_train_v1"] == pytest.approx((0.5 - 1.0 + 0.0) / 3)
    assert metrics["sampling/kl_sample_train_v2"] == pytest.approx(0.5 * (0.25 + 1.0) / 3)
    assert metrics["ac_tokens_per_turn"] == pytest.approx(1.5)


@pytest.mark.parametrize("fast", [False, True])
def test_same_fp32_model_gives_zero_and_a_perturbed_one_does_not(tmp_path, fast):
    trainer = tiny_trainer(SamplingKLTrainer, tmp_path, PROMPTS, constant_reward, temperature=0.7)
    if fast:  # the recipe's generation wrapper and completion-only log-prob head over ours
        assert "completion-only log-prob head" in fast_paths.install(trainer)
    out = scored_batch(trainer)
    lengths = out["completion_mask"].sum(1).float()
    assert torch.equal(~torch.isnan(out[SAMPLING_LOGPS]), out["completion_mask"].bool())
    trainer.compute_loss(trainer.model, out)
    assert abs(logged(trainer, "sampling/kl_sample_train_v1")) < 1e-3
    assert logged(trainer, "sampling/kl_sample_train_v2") < 1e-3
    assert logged(trainer, "ac_tokens_per_turn") == pytest.approx(lengths.mean().item())

    torch.manual_seed(1)
    with torch.no_grad():  # the learner's weights move between sampling and scoring
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    trainer.compute_loss(trainer.model, out)
    # v2 (half the mean squared difference) is the steady one; v1 is signed, a noisy mean over ~90 tokens
    assert logged(trainer, "sampling/kl_sample_train_v2") > 0.05


def test_sampling_logprobs_follow_the_sampling_warpers(tmp_path):
    # top-k renormalises over k tokens: every sampled token is likelier to the sampler than to the learner
    trainer = tiny_trainer(SamplingKLTrainer, tmp_path, PROMPTS, constant_reward, top_k=5)
    out = scored_batch(trainer)
    trainer.compute_loss(trainer.model, out)
    assert logged(trainer, "sampling/kl_sample_train_v1") > 0.1
    with torch.no_grad():
        training = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
            torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
            out["completion_ids"].size(1),
        )[0]
    sampled = ~torch.isnan(out[SAMPLING_LOGPS])
    assert bool((out[SAMPLING_LOGPS][sampled] > training[sampled] - 1e-5).all())


def test_old_log_probs_are_the_learner_side_when_trl_computes_them(tmp_path):
    # two generation rounds' worth per step: TRL scores old_per_token_logps at generation time
    trainer = tiny_trainer(SamplingKLTrainer, tmp_path, PROMPTS, constant_reward, steps_per_generation=2)
    out = scored_batch(trainer)
    assert "old_per_token_logps" in out
    out["old_per_token_logps"] = out["old_per_token_logps"] - 0.25  # what the metric must read
    trainer.compute_loss(trainer.model, out)
    assert logged(trainer, "sampling/kl_sample_train_v1") == pytest.approx(0.25, abs=1e-3)


def test_the_fixed_eval_generates_as_before(tmp_path):
    from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    plain = tiny_model(tokenizer, seed=3)
    trainer = tiny_trainer(
        SamplingKLTrainer, tmp_path, PROMPTS, constant_reward, model=tiny_model(tokenizer, seed=3)
    )
    enc = tokenizer(["1+1?"], return_tensors="pt")
    kwargs = {"max_new_tokens": 6, "do_sample": True}
    torch.manual_seed(5)
    expected = plain.generate(**enc, **kwargs)
    torch.manual_seed(5)
    assert torch.equal(trainer.model.generate(**enc, **kwargs), expected)
    assert trainer._recorded is None  # outside a training generation nothing is recorded


def test_the_warpers_are_generates_own_or_none():
    from transformers import GenerationConfig

    from grpo_recipes.train.sampling_kl import sampling_warpers

    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=5, top_p=0.9)
    names = [type(w).__name__ for w in sampling_warpers(config, GenerationConfig(min_p=0.1))]
    assert names == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper"]
    assert len(sampling_warpers(GenerationConfig(do_sample=True, top_k=0))) == 0  # plain sampling
    assert sampling_warpers(GenerationConfig(do_sample=False)) is None  # greedy: nothing sampled
    assert sampling_warpers(GenerationConfig(do_sample=True, typical_p=0.5)) is None  # not reproduced here


def test_the_sampler_draws_from_the_warped_distribution_and_records_its_log_probs():
    from transformers.generation import logits_process as lp

    from grpo_recipes.train.sampling_kl import InverseCDFSampler

    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 2
    warpers = lp.LogitsProcessorList([lp.TemperatureLogitsWarper(0.7), lp.TopKLogitsWarper(10)])
    expected = torch.softmax(warpers(None, logits.clone()), -1)
    sampler, counts, draws = InverseCDFSampler(warpers), torch.zeros_like(logits), 5000
    for _ in range(draws):
        scores = sampler(None, logits.clone())
        token = scores.argmax(1, keepdim=True)  # generate's greedy loop takes the sampled token
        assert torch.allclose(sampler.steps[-1], expected.gather(1, token).log().squeeze(1), atol=1e-5)
        counts.scatter_add_(1, token, torch.ones(4, 1))
    assert (counts / draws - expected).abs().max() < 0.03  # 4 standard errors at 5000 draws
    assert counts[expected == 0].sum() == 0  # nothing outside the top-k
