"""Reward functions written the way TRL's and open-r1's docs write them run unchanged: every reward is
called as TRL calls it, by keyword (prompts=, completions=, completion_ids=, and the dataset's columns),
during training and in samples.jsonl alike."""

import json

import pytest

from tests.conftest import read_jsonl, run_train

# The signature shapes of TRL's GRPOTrainer docs ("Using a custom reward function") and open-r1's rewards.
TRL_STYLE_REWARDS = """
def reward_len(completions, **kwargs):
    return [-abs(20 - len(c[0]["content"] if isinstance(c, list) else c)) / 20 for c in completions]


def format_reward(completions, **kwargs):
    return [float("[ANSWER]" in (c[0]["content"] if isinstance(c, list) else c)) for c in completions]


def with_prompts(prompts, completions, **kwargs):
    assert len(prompts) == len(completions)
    return [0.0 for _ in completions]


def with_a_column(completions, answer, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(str(a) in t) for t, a in zip(texts, answer)]


def with_ids(completion_ids, **kwargs):
    return [min(len(ids), 8) / 8 for ids in completion_ids]
"""
NAMES = ("reward_len", "format_reward", "with_prompts", "with_a_column", "with_ids")


@pytest.mark.slow
def test_rewards_with_trls_documented_signatures_train_unchanged(tmp_path):
    (tmp_path / "trl_style_rewards.py").write_text(TRL_STYLE_REWARDS)
    rewards = [f"dataset.rewards.{n}={{fn: trl_style_rewards.{n}, weight: 0.1}}" for n in NAMES]
    out = run_train(
        "model=tiny_random",
        "max_steps=2",
        "eval.size=2",
        "grpo.max_completion_length=8",
        "log_samples_every=1",
        f"output_root={tmp_path}",
        *rewards,
        env={"PYTHONPATH": str(tmp_path)},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "arithmetic-tiny-random"
    logged = {k for row in read_jsonl(run / "metrics.jsonl") for k in row}
    for name in NAMES:
        assert f"train/rewards/{name}/mean" in logged, name
    samples = read_jsonl(run / "samples.jsonl")
    assert samples and all(set(NAMES) <= set(row["rewards"]) for row in samples)
    assert json.loads(json.dumps(samples[0]["rewards"]))["with_prompts"] == 0.0
