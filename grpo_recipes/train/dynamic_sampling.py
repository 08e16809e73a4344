"""DAPO's dynamic sampling (`grpo.dynamic_sampling=true`, README "Evaluation and metrics"): further batches,
seeded by (seed, step, draw) so every process and a resume draw the same, until enough groups' rewards
differ; at `dynamic_sampling_max_draws` zero-signal groups fill the batch."""

import itertools
from typing import Any

import torch
from trl.trainer.utils import RepeatSampler, pad

from grpo_recipes.train.sampling_kl import SAMPLING_LOGPS, SamplingKLTrainer

# The pad value of each padded output key of `_generate_and_score_completions` (None: the pad token;
# prompts are left-padded). `num_items_in_batch` is counted again over the merged batch.
PADS = {"prompt_ids": None, "prompt_mask": 0, "completion_ids": None, "completion_mask": 0, "tool_mask": 1}
PADS |= {"old_per_token_logps": 0.0, "ref_per_token_logps": 0.0, "sampling_per_token_logps": 0.0}
PADS |= {"importance_sampling_ratio": 1.0, SAMPLING_LOGPS: float("nan")}


def varied_groups(advantages: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Per group: whether its rewards differ (the advantage increases with the reward within a group)."""
    grouped = advantages.reshape(advantages.size(0) // num_generations, num_generations, -1)
    return (grouped.amax(dim=(1, 2)) - grouped.amin(dim=(1, 2))) > 1e-6


def merge_rows(rows: list[tuple[dict[str, Any], int]], pad_token_id: int) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in rows[0][0]:
        if key == "num_items_in_batch":
            continue
        parts = [out[key][i] for out, i in rows]
        if key == "advantages":
            merged[key] = torch.stack(parts)
        elif key in PADS:
            value = pad_token_id if PADS[key] is None else PADS[key]
            merged[key] = pad(parts, value, "left" if key.startswith("prompt") else "right")
        else:
            raise NotImplementedError(
                f"grpo.dynamic_sampling: cannot merge the trainer output {key!r} across draws (text-only "
                "training is supported)"
            )
    return merged


class DynamicSamplingTrainer(SamplingKLTrainer):
    """Overrides `_generate_and_score_completions` (TRL has no public hook between scoring a batch and
    training on it): it calls TRL's as many times as draws are needed, on every process alike."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_draws = self.args.dynamic_sampling_max_draws
        # whole groups on each process (checks.py's check_batch refused any other batch)
        per_process = self.args.generation_batch_size // self.accelerator.num_processes
        self.groups_per_process = per_process // self.num_generations

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        group, wanted, device = self.num_generations, self.groups_per_process, self.accelerator.device
        kept: list[tuple[dict, int]] = []  # (draw output, group index): varied groups, in draw order
        zero_signal: list[tuple[dict, int]] = []
        draws, batch = 0, inputs
        while batch is not None:
            output = super()._generate_and_score_completions(batch)
            draws += 1
            for g, varied in enumerate(varied_groups(output["advantages"], group).tolist()):
                (kept if varied else zero_signal).append((output, g))
            # Every process draws again while any still lacks groups: TRL's scoring gathers across processes.
            short = torch.tensor(max(wanted - len(kept), 0), device=device)
            if draws >= self.max_draws or self.accelerator.gather(short).max().item() == 0:
                break
            batch = self._extra_batch(draws)
        n_varied = min(len(kept), wanted)
        chosen = kept[:wanted] + zero_signal[: wanted - n_varied]
        merged = merge_rows(
            [(o, g * group + j) for o, g in chosen for j in range(group)], self._tokenizer.pad_token_id
        )
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        counts = torch.tensor([draws * wanted, n_varied, float(n_varied < wanted)], device=device)
        drawn, n_kept, cap_hit = self.accelerator.gather(counts).view(-1, 3).sum(0).tolist()
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/groups_drawn"].append(drawn)
        metrics["dynamic_sampling/groups_kept"].append(n_kept)
        metrics["dynamic_sampling/draws"].append(float(draws))
        metrics["dynamic_sampling/cap_hit"].append(float(cap_hit > 0))
        return merged

    def _extra_batch(self, draw: int) -> list[dict[str, Any]] | None:
        """This process's share of one more generation batch (None: fewer prompts than a batch)."""
        size = self.args.generation_batch_size
        sampler = RepeatSampler(
            data_source=self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=size // self.num_generations,
            shuffle=True,
            seed=self.args.seed + 1_000_003 * (1 + self.state.global_step) + 7_919 * draw,
        )
        indices = list(itertools.islice(iter(sampler), size))
        if len(indices) < size:
            return None
        share = size // self.accelerator.num_processes
        start = self.accelerator.process_index * share
        return [self.train_dataset[i] for i in indices[start : start + share]]
