"""The tinker recipe's sampler-vs-learner metrics, on every training step:

- `sampling/kl_sample_train_v1` = mean(sampling_logp - training_logp) over the completion tokens
- `sampling/kl_sample_train_v2` = 0.5 * mean((sampling_logp - training_logp) ** 2)
- `ac_tokens_per_turn` = sampled (action) tokens per completion; one turn per completion here

Both KLs are ~0 when sampler and learner compute the same distribution; they grow with numerical
mismatch (bf16 generation, a vLLM engine) or stale weights. Sampling log-probs: vLLM's (processed:
after temperature and top-k/p), or recorded from transformers' `generate` (sampling_logprobs.py).
Training log-probs: TRL's `old_per_token_logps` when it computes them (off-policy steps, vLLM), else
the loss pass's own, detached. The cost is one logsumexp over the vocabulary per generated token.
"""

from __future__ import annotations

import logging

import torch
from trl import GRPOTrainer

from grpo_recipes.train.sampling_logprobs import SamplingLogprobRecorder

log = logging.getLogger(__name__)

# The output key carrying sampling log-probs through TRL's shuffle and split (NaN: no sampled token).
# Not TRL's `sampling_per_token_logps`, which would change what the off-policy mask compares against.
SAMPLING_LOGPS = "recipe_sampling_logps"


def sample_train_sums(
    sampling: torch.Tensor, training: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[sum diff, sum diff^2, scored tokens, sampled tokens, completions] of one micro-batch, to be summed
    over processes before dividing (sample_train_metrics)."""
    sampled = ~torch.isnan(sampling)
    scored = sampled & loss_mask.bool()
    diff = torch.where(scored, sampling - training.float(), torch.zeros_like(sampling))
    return torch.stack(
        [
            diff.sum(),
            diff.pow(2).sum(),
            scored.sum().float(),
            sampled.sum().float(),
            torch.tensor(float(sampling.size(0)), device=sampling.device),
        ]
    )


def sample_train_metrics(sums: torch.Tensor) -> dict[str, float]:
    total, total_sq, scored, sampled, completions = sums.tolist()
    metrics = {"ac_tokens_per_turn": sampled / max(completions, 1.0)}
    if scored:
        metrics["sampling/kl_sample_train_v1"] = total / scored
        metrics["sampling/kl_sample_train_v2"] = 0.5 * total_sq / scored
    return metrics


def padded_rows(rows: list[torch.Tensor], width: int, device) -> torch.Tensor:
    """Per-completion log-probs as one (batch, width) tensor, NaN past each completion's end."""
    out = torch.full((len(rows), width), float("nan"), device=device)
    for i, row in enumerate(rows):
        n = min(len(row), width)
        out[i, :n] = row[:n].to(device)
    return out


class SamplingKLTrainer(GRPOTrainer):
    """GRPOTrainer that logs the sampler-vs-learner KL. TRL has no public hook on the generated batch or
    the loss pass's log-probs, so the methods that produce them are extended (each calls TRL's first)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._recorder = SamplingLogprobRecorder()
        self._recorder.wrap(self.model)  # TRL generates with the unwrapped model: this one
        self._sampled_rows: list[torch.Tensor] | None = None
        self._loss_pass_logps: torch.Tensor | None = None
        self._said_why_not = False

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        with self._recorder.recording():
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        if logprobs is not None:  # vLLM's; a token it could not score is None
            rows = [torch.tensor([float("nan") if x is None else x for x in lp]) for lp in logprobs]
        elif self._recorder.logprobs is not None:
            rows = [lp[: len(ids)] for lp, ids in zip(self._recorder.logprobs, completion_ids, strict=True)]
        else:
            rows = None
            if not self._said_why_not:
                self._said_why_not = True
                log.info(
                    "sampling/kl_sample_train_v1/v2 and ac_tokens_per_turn are not logged: %s",
                    self._recorder.why_not or "this generation backend returns no sampling log-probs",
                )
        self._sampled_rows = rows
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs):
        self._sampled_rows = None
        output = super()._generate_and_score_completions(inputs)
        # Multi-turn tool calls generate several times per completion: one turn per completion only.
        if self.model.training and self._sampled_rows is not None and not self.tools:
            completion_ids = output["completion_ids"]
            output[SAMPLING_LOGPS] = padded_rows(
                self._sampled_rows, completion_ids.size(1), completion_ids.device
            )
        self._sampled_rows = None
        return output

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if torch.is_grad_enabled():  # the loss pass: TRL scores old and reference log-probs under no_grad
            self._loss_pass_logps = logps.detach()
        return logps, entropies, aux_loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        self._loss_pass_logps = None
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if self.model.training and SAMPLING_LOGPS in inputs:
            self._log_sample_train(inputs)
        self._loss_pass_logps = None
        return result

    def _log_sample_train(self, inputs) -> None:
        training = inputs.get("old_per_token_logps")
        training = self._loss_pass_logps if training is None else training
        if training is None:  # a loss path that does not score per token (Liger): nothing to compare
            return
        loss_mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            loss_mask = loss_mask * inputs["tool_mask"]
        sums = sample_train_sums(inputs[SAMPLING_LOGPS], training, loss_mask)
        for name, value in sample_train_metrics(self.accelerator.reduce(sums, reduction="sum")).items():
            self._metrics["train"][name].append(value)
