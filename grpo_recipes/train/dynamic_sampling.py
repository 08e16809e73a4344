"""Dynamic sampling in the DAPO sense (`grpo.dynamic_sampling=true`): no step without signal.

A prompt group whose completions all got the same reward has zero advantage and teaches nothing.
Each step, after the usual generation batch, further batches of prompts are drawn from the train
data and scored, and only groups whose rewards differ are kept, until the batch holds as many groups
as usual or `grpo.dynamic_sampling_max_draws` generation batches have been drawn. A batch still short
of varied groups at the cap is filled with zero-signal groups (no gradient, the usual tensor shapes)
and `dynamic_sampling/cap_hit` says so. Logged per step: `dynamic_sampling/groups_drawn`,
`dynamic_sampling/groups_kept` (varied groups in the batch trained on), `dynamic_sampling/draws`.

Extra prompts come from TRL's RepeatSampler seeded by (seed, step, draw): deterministic, the same on
every process, and the same after a resume. With `scale_rewards=batch`, each draw's advantages keep
the scale of the batch they were drawn in.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch

from grpo_recipes.config.checks import check_dynamic_sampling
from grpo_recipes.train.sampling_kl import SAMPLING_LOGPS, SamplingKLTrainer

# How each output key of `_generate_and_score_completions` merges across draws: left-padded prompt
# tensors, right-padded per-token tensors (with the pad value; None: the tokenizer's pad id), and
# per-completion tensors. `num_items_in_batch` is counted again over the merged batch.
LEFT_PADDED = {"prompt_ids": None, "prompt_mask": 0}
RIGHT_PADDED = {
    "completion_ids": None,
    "completion_mask": 0,
    "tool_mask": 1,
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
    "importance_sampling_ratio": 1.0,
    SAMPLING_LOGPS: float("nan"),
}
PER_COMPLETION = ("advantages",)


def varied_groups(advantages: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Per group: whether its completions' rewards differ. Within a group the advantage is an increasing
    function of the reward, so equal rewards are equal advantages."""
    grouped = advantages.reshape(advantages.size(0) // num_generations, num_generations, -1)
    return (grouped.amax(dim=(1, 2)) - grouped.amin(dim=(1, 2))) > 1e-6


def extra_draw_seed(seed: int, step: int, draw: int) -> int:
    """A sampler seed per (run seed, step, draw), apart from the main sampler's (the run seed itself)."""
    return seed + 1_000_003 * (1 + step) + 7_919 * draw


def merge_rows(pieces: list[tuple[dict[str, Any], torch.Tensor]], pad_token_id: int) -> dict[str, Any]:
    """The rows `index` of each draw's output, as one output (pieces in order; pads widened to fit)."""
    keys = pieces[0][0].keys()
    merged: dict[str, Any] = {}
    for key in keys:
        if key == "num_items_in_batch":
            continue
        parts = [out[key][index] for out, index in pieces]
        if key in LEFT_PADDED or key in RIGHT_PADDED:
            pad = {**LEFT_PADDED, **RIGHT_PADDED}[key]
            pad = pad_token_id if pad is None else pad
            width = max(p.size(1) for p in parts)
            left = key in LEFT_PADDED
            parts = [
                torch.nn.functional.pad(
                    p, (width - p.size(1), 0) if left else (0, width - p.size(1)), value=pad
                )
                for p in parts
            ]
        elif key not in PER_COMPLETION:
            raise NotImplementedError(
                f"grpo.dynamic_sampling: cannot merge the trainer output {key!r} across draws (text-only "
                "training is supported)"
            )
        merged[key] = torch.cat(parts, dim=0)
    return merged


class DynamicSamplingTrainer(SamplingKLTrainer):
    """Overrides `_generate_and_score_completions` (TRL has no public hook between scoring a batch and
    training on it): it calls TRL's as many times as draws are needed, on every process alike."""

    def __init__(self, *args, max_draws: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_draws = max_draws
        processes = self.accelerator.num_processes
        check_dynamic_sampling(
            self.args.generation_batch_size // processes,
            self.num_generations,
            f"grpo.generation_batch_size ({self.args.generation_batch_size}) / processes ({processes})",
        )
        self.groups_per_process = self.args.generation_batch_size // processes // self.num_generations

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        group = self.num_generations
        kept: list[tuple[dict, int]] = []  # (draw output, group index): varied groups, in draw order
        zero_signal: list[tuple[dict, int]] = []
        draws, batch = 0, inputs
        while batch is not None:
            output = super()._generate_and_score_completions(batch)
            draws += 1
            for g, varied in enumerate(varied_groups(output["advantages"], group).tolist()):
                (kept if varied else zero_signal).append((output, g))
            # Every process draws again while any still lacks groups: TRL's scoring gathers across processes.
            short = torch.tensor(max(self.groups_per_process - len(kept), 0), device=self.accelerator.device)
            if draws >= self.max_draws or self.accelerator.gather(short).max().item() == 0:
                break
            batch = self._extra_batch(draws)
        chosen = kept[: self.groups_per_process]
        n_varied = len(chosen)
        chosen += zero_signal[: self.groups_per_process - n_varied]
        pieces = []
        for output, groups in itertools.groupby(chosen, key=lambda c: id(c[0])):
            groups = list(groups)
            rows = torch.cat([torch.arange(g * group, (g + 1) * group) for _, g in groups])
            pieces.append((groups[0][0], rows.to(self.accelerator.device)))
        merged = merge_rows(pieces, self._tokenizer.pad_token_id)
        loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        counts = torch.tensor(
            [draws * self.groups_per_process, n_varied, float(n_varied < self.groups_per_process)],
            device=self.accelerator.device,
        )
        drawn, n_kept, cap_hit = self.accelerator.gather(counts).view(-1, 3).sum(0).tolist()
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/groups_drawn"].append(drawn)
        metrics["dynamic_sampling/groups_kept"].append(n_kept)
        metrics["dynamic_sampling/draws"].append(float(draws))
        metrics["dynamic_sampling/cap_hit"].append(float(cap_hit > 0))
        return merged

    def _extra_batch(self, draw: int) -> list[dict[str, Any]] | None:
        """This process's share of one more generation batch, as the train dataloader would give it; None
        when the dataset holds fewer prompts than a batch."""
        from trl.trainer.utils import RepeatSampler

        sampler = RepeatSampler(
            data_source=self.train_dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            shuffle=True,
            seed=extra_draw_seed(self.args.seed, self.state.global_step, draw),
        )
        indices = list(itertools.islice(iter(sampler), self.args.generation_batch_size))
        if len(indices) < self.args.generation_batch_size:
            return None
        share = len(indices) // self.accelerator.num_processes
        start = self.accelerator.process_index * share
        return [self.train_dataset[i] for i in indices[start : start + share]]


def trainer_class(grpo: dict[str, Any]):
    """The trainer build_trainer uses: with dynamic sampling only when `grpo.dynamic_sampling` is on."""
    if grpo["dynamic_sampling"]:
        return functools.partial(DynamicSamplingTrainer, max_draws=grpo["dynamic_sampling_max_draws"])
    return SamplingKLTrainer
