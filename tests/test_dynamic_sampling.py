"""Dynamic sampling: further draws until the batch holds only groups whose rewards differ (or the cap),
the usual tensor shapes, and the counts in the trainer's metrics."""

import pytest
import torch

from grpo_recipes.train.dynamic_sampling import DynamicSamplingTrainer, merge_rows, varied_groups
from grpo_recipes.train.sampling_kl import SAMPLING_LOGPS, SamplingKLTrainer, trainer_class
from tests.conftest import declared, tiny_trainer

# TRL 1.16 calls transformers' deprecated alias on every generation (as run.py, this one warning only).
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
VARIED = [f"vary {i}" for i in range(4)]
SAME = [f"same {i}" for i in range(12)]


class GroupReward:
    """0/1 alternating within a group for the "vary" prompts, 0 for the others; remembers each draw's
    prompts."""

    __name__ = "group_reward"

    def __init__(self):
        self.draws: list[list[str]] = []

    def __call__(self, prompts, completions, **kwargs):
        texts = [p[-1]["content"] for p in prompts]
        self.draws.append(texts[::4])  # one prompt per group of 4
        return [float(i % 2) if t.startswith("vary") else 0.0 for i, t in enumerate(texts)]


def ds_trainer(tmp_path, prompts, max_draws):
    reward = GroupReward()
    trainer = tiny_trainer(
        DynamicSamplingTrainer, tmp_path, prompts, reward, dynamic_sampling_max_draws=max_draws
    )
    return trainer, reward


def group_prompts(trainer, out):
    texts = trainer.processing_class.batch_decode(out["prompt_ids"][::4], skip_special_tokens=True)
    return [t.split("user\n")[1].split("\n")[0] for t in texts]


def metrics(trainer):
    return {k.split("/")[1]: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("dynamic")}


def test_keeps_only_groups_whose_rewards_differ(tmp_path):
    trainer, reward = ds_trainer(tmp_path, VARIED + SAME, max_draws=20)
    first = [trainer.train_dataset[len(VARIED) + i] for i in (0, 0, 0, 0, 1, 1, 1, 1)]  # two "same" groups
    out = trainer._generate_and_score_completions(first)

    assert out["prompt_ids"].size(0) == 8 and out["completion_ids"].shape == out["completion_mask"].shape
    assert all(p.startswith("vary") for p in group_prompts(trainer, out))
    assert varied_groups(out["advantages"], 4).all()
    assert out["num_items_in_batch"].item() == out["completion_mask"].sum().item()
    assert torch.equal(~torch.isnan(out[SAMPLING_LOGPS]), out["completion_mask"].bool())
    drawn = [p for draw in reward.draws for p in draw]
    varied_before_last = sum(p.startswith("vary") for draw in reward.draws[:-1] for p in draw)
    assert len(reward.draws) >= 2 and varied_before_last < 2 <= sum(p.startswith("vary") for p in drawn)
    assert metrics(trainer) == {
        "groups_drawn": float(len(drawn)),
        "groups_kept": 2.0,
        "draws": float(len(reward.draws)),
        "cap_hit": 0.0,
    }
    trainer.compute_loss(trainer.model, out)  # the merged batch trains as TRL's own would
    assert abs(trainer._metrics["train"]["sampling/kl_sample_train_v1"][-1]) < 1e-3


def test_the_cap_fills_the_batch_with_zero_signal_groups(tmp_path):
    trainer, reward = ds_trainer(tmp_path, SAME, max_draws=3)
    out = trainer._generate_and_score_completions([trainer.train_dataset[i] for i in (0,) * 4 + (1,) * 4])
    assert len(reward.draws) == 3 and out["prompt_ids"].size(0) == 8
    assert not varied_groups(out["advantages"], 4).any()
    assert metrics(trainer) == {"groups_drawn": 6.0, "groups_kept": 0.0, "draws": 3.0, "cap_hit": 1.0}
    # every draw without signal: the no-signal warning still reads frac_reward_zero_std = 1 for the step
    assert trainer._metrics["train"]["frac_reward_zero_std"] == [1.0, 1.0, 1.0]


def test_a_batch_with_signal_draws_once(tmp_path):
    trainer, reward = ds_trainer(tmp_path, VARIED + SAME, max_draws=4)
    out = trainer._generate_and_score_completions([trainer.train_dataset[i] for i in (0,) * 4 + (1,) * 4])
    assert len(reward.draws) == 1 and group_prompts(trainer, out) == ["vary 0", "vary 1"]
    assert metrics(trainer) == {"groups_drawn": 2.0, "groups_kept": 2.0, "draws": 1.0, "cap_hit": 0.0}


def test_merge_pads_prompts_left_and_completions_right():
    nan = float("nan")
    a = {
        "prompt_ids": torch.tensor([[5, 6], [7, 8]]),
        "prompt_mask": torch.ones(2, 2, dtype=torch.long),
        "completion_ids": torch.tensor([[1], [2]]),
        "completion_mask": torch.ones(2, 1, dtype=torch.long),
        "advantages": torch.tensor([1.0, -1.0]),
        SAMPLING_LOGPS: torch.tensor([[-0.1], [-0.2]]),
        "num_items_in_batch": torch.tensor(2),
    }
    b = {
        "prompt_ids": torch.tensor([[9, 9, 9]]),
        "prompt_mask": torch.ones(1, 3, dtype=torch.long),
        "completion_ids": torch.tensor([[3, 4, 5]]),
        "completion_mask": torch.tensor([[1, 1, 0]]),
        "advantages": torch.tensor([0.5]),
        SAMPLING_LOGPS: torch.tensor([[-0.3, -0.4, nan]]),
        "num_items_in_batch": torch.tensor(2),
    }
    merged = merge_rows([(a, 1), (b, 0)], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[0, 7, 8], [9, 9, 9]]
    assert merged["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert merged["completion_ids"].tolist() == [[2, 0, 0], [3, 4, 5]]
    assert merged["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 0]]
    assert merged["advantages"].tolist() == [-1.0, 0.5]
    assert torch.isnan(merged[SAMPLING_LOGPS]).tolist() == [[False, True, True], [False, False, True]]
    assert "num_items_in_batch" not in merged  # counted again by the trainer over the merged rows
    with pytest.raises(NotImplementedError, match="pixel_values"):
        merge_rows([({**a, "pixel_values": torch.zeros(2, 3)}, 0)], pad_token_id=0)


def test_varied_groups_reads_equal_advantages_as_no_signal():
    advantages = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.7, -0.7, 0.7, -0.7, 0.3, 0.3, 0.3, 0.3])
    assert varied_groups(advantages, 4).tolist() == [False, True, False]


def test_the_switch_off_is_the_trainer_without_dynamic_sampling():
    from types import SimpleNamespace

    assert trainer_class(SimpleNamespace(dynamic_sampling=False)) is SamplingKLTrainer
    assert (
        trainer_class(SimpleNamespace(**declared("grpo"))) is SamplingKLTrainer
    )  # the declared default: off
    assert trainer_class(SimpleNamespace(dynamic_sampling=True)) is DynamicSamplingTrainer


@pytest.mark.slow
def test_train_grpo_logs_dynamic_sampling_and_the_sampling_kl(tmp_path):
    from tests.conftest import read_jsonl, run_train

    proc = run_train(
        "model=tiny_random",
        "eval.size=4",
        "grpo.max_completion_length=8",
        "grpo.dynamic_sampling=true",
        "grpo.dynamic_sampling_max_draws=3",
        "max_steps=2",
        f"output_root={tmp_path}",
        "run_name=ds",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    train = [r for r in read_jsonl(tmp_path / "ds" / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:  # 16 completions per step in groups of 8: 2 groups per generation batch
        draws, kept = r["train/dynamic_sampling/draws"], r["train/dynamic_sampling/groups_kept"]
        assert 1 <= draws <= 3 and r["train/dynamic_sampling/groups_drawn"] == 2 * draws
        assert r["train/dynamic_sampling/cap_hit"] == float(kept < 2)
        assert draws == 3 or kept == 2  # drawing stops at the cap or with a full batch
        assert abs(r["train/sampling/kl_sample_train_v1"]) < 1e-3  # fp32: sampler and learner agree
        assert 0 <= r["train/sampling/kl_sample_train_v2"] < 1e-3
        assert 1 <= r["train/ac_tokens_per_turn"] <= 8
