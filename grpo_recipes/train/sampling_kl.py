"""Training generations' sampling, and the tinker recipe's sampler-vs-learner metrics (README "Evaluation and
metrics"). On TRL's transformers path the recipe samples each token itself (InverseCDFSampler: the same
distribution at a fraction of the cost) and keeps its log-prob; vLLM returns its own. Training log-probs are
TRL's `old_per_token_logps` when it computes them, else the loss pass's."""

import copy
import functools
import logging

import torch
from transformers.generation import logits_process as lp
from trl import GRPOTrainer

from grpo_recipes.outputs.checkpoints import WholeCheckpoints

log = logging.getLogger(__name__)

# The output key carrying sampling log-probs through TRL's shuffle and split (NaN: no sampled token).
# Not TRL's `sampling_per_token_logps`, which would change what the off-policy mask compares against.
SAMPLING_LOGPS = "recipe_sampling_logps"


def sample_train_sums(
    sampling: torch.Tensor, training: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """[sum diff, sum diff^2, scored tokens, sampled tokens, completions]: summed over processes, then divided
    (sample_train_metrics)."""
    sampled = ~torch.isnan(sampling)
    scored = sampled & loss_mask.bool()
    diff = torch.where(scored, sampling - training.float(), torch.zeros_like(sampling))
    completions = torch.tensor(float(sampling.size(0)), device=sampling.device)
    return torch.stack(
        [diff.sum(), diff.pow(2).sum(), scored.sum().float(), sampled.sum().float(), completions]
    )


def sample_train_metrics(sums: torch.Tensor) -> dict[str, float]:
    total, total_sq, scored, sampled, completions = sums.tolist()
    metrics = {"ac_tokens_per_turn": sampled / max(completions, 1.0)}
    if scored:
        metrics["sampling/kl_sample_train_v1"] = total / scored
        metrics["sampling/kl_sample_train_v2"] = 0.5 * total_sq / scored
    return metrics


def sampling_warpers(config, fallback=None) -> lp.LogitsProcessorList | None:
    """The warpers generate applies when sampling with `config` (transformers' order), or None when the
    sampled distribution is not one this module reproduces (greedy, beams, other warpers)."""

    def value(name: str):  # generate fills a config's unset (None) fields from the model's
        v = getattr(config, name, None)
        return getattr(fallback, name, None) if v is None and fallback is not None else v

    if not value("do_sample") or (value("num_beams") or 1) > 1 or value("watermarking_config") is not None:
        return None
    if value("top_h") is not None or (value("typical_p") or 1.0) < 1.0:
        return None
    if 0.0 < (value("epsilon_cutoff") or 0.0) < 1.0 or 0.0 < (value("eta_cutoff") or 0.0) < 1.0:
        return None
    temperature, top_k, top_p, min_p = (value(n) for n in ("temperature", "top_k", "top_p", "min_p"))
    warpers = lp.LogitsProcessorList()
    if temperature is not None and temperature != 1.0:
        warpers.append(lp.TemperatureLogitsWarper(temperature))
    if top_k is not None and top_k != 0:
        warpers.append(lp.TopKLogitsWarper(top_k=top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(lp.TopPLogitsWarper(top_p=top_p))
    if min_p is not None:
        warpers.append(lp.MinPLogitsWarper(min_p=min_p))
    return warpers


class InverseCDFSampler(lp.LogitsProcessor):
    """Samples each next token itself and returns scores whose argmax is that token, so `generate` runs its
    greedy loop: the warped distribution's CDF and one uniform per row (the same distribution as generate's
    multinomial, which draws an exponential per vocabulary entry: ~25x the cost at 49k entries). Records
    log p(token) under the warped distribution, the sampler's side of the KL metrics."""

    def __init__(self, warpers: lp.LogitsProcessorList):
        self.warpers, self.steps = warpers, []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(self.warpers(input_ids, scores).float(), dim=-1)
        cdf = logp.exp().cumsum(dim=-1)
        u = torch.rand(cdf.size(0), 1, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
        token = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.size(1) - 1)
        self.steps.append(logp.gather(1, token).squeeze(1))
        return torch.full_like(scores, float("-inf")).scatter_(1, token, 0.0)

    def logprobs(self, n: int, batch: int) -> torch.Tensor:  # (batch, n): the n generated tokens'
        return torch.stack(self.steps[:n], dim=1) if n else torch.zeros((batch, 0))


class SamplingKLTrainer(WholeCheckpoints, GRPOTrainer):
    """TRL has no public hook on the generated batch or the loss pass's log-probs, so the methods that produce
    them are extended (each calls TRL's first)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._recording = False  # True in TRL's training generations: the fixed eval generates as it was
        self._recorded: torch.Tensor | None = None  # sampled-token log-probs (batch, new tokens) or None
        self._why_not: str | None = None  # why they could not be recorded
        self._sampled_rows: list[torch.Tensor] | None = None
        self._loss_pass_logps: torch.Tensor | None = None
        self._said_why_not = False
        model = self.model  # TRL generates with the unwrapped model: this one
        generate = model.generate

        @functools.wraps(generate)
        def generate_recording(*args, **kwargs):
            if not self._recording:
                return generate(*args, **kwargs)
            config = kwargs.get("generation_config")
            warpers = sampling_warpers(config, model.generation_config)
            input_ids = kwargs.get("input_ids")
            if warpers is None or args or input_ids is None or kwargs.get("logits_processor"):
                self._why_not = "generate is not plain sampling with input_ids (greedy, beams, other warpers)"
                return generate(*args, **kwargs)
            sampler = InverseCDFSampler(warpers)  # it samples; generate's loop only takes its token
            greedy = copy.deepcopy(config if config is not None else model.generation_config)
            greedy.update(do_sample=False, temperature=1.0, top_k=50, top_p=1.0, min_p=None)
            kwargs["generation_config"] = greedy
            out = generate(*args, logits_processor=lp.LogitsProcessorList([sampler]), **kwargs)
            sequences = out if isinstance(out, torch.Tensor) else out.sequences
            self._recorded = sampler.logprobs(sequences.size(1) - input_ids.size(1), sequences.size(0))
            return out

        model.generate = generate_recording

    def _generate_single_turn(self, *args, **kwargs):
        self._recording, self._recorded, self._why_not = True, None, None
        try:
            completion_ids, logprobs = super()._generate_single_turn(*args, **kwargs)
        finally:
            self._recording = False
        rows = None
        if logprobs is not None:  # vLLM's; a token it could not score is None
            rows = [torch.tensor([float("nan") if x is None else x for x in row]) for row in logprobs]
        elif self._recorded is not None:
            recorded = self._recorded.clone()  # made in generate's inference mode (fast_generation.py)
            rows = [row[: len(ids)] for row, ids in zip(recorded, completion_ids, strict=True)]
        elif not self._said_why_not:
            self._said_why_not = True
            log.info(
                "sampling/kl_sample_train_v1/v2 and ac_tokens_per_turn are not logged: %s",
                self._why_not or "this generation backend returns no sampling log-probs",
            )
        self._sampled_rows = rows
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs):
        self._sampled_rows = None
        output = super()._generate_and_score_completions(inputs)
        # Multi-turn tool calls generate several times per completion: one turn per completion only.
        if self.model.training and self._sampled_rows is not None and not self.tools:
            ids = output["completion_ids"]
            logps = torch.full((len(self._sampled_rows), ids.size(1)), float("nan"), device=ids.device)
            for i, row in enumerate(self._sampled_rows):
                n = min(len(row), ids.size(1))
                logps[i, :n] = row[:n].to(ids.device)
            output[SAMPLING_LOGPS] = logps
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
        training = inputs.get("old_per_token_logps")
        training = self._loss_pass_logps if training is None else training
        # None: a loss path that does not score per token (Liger), nothing to compare
        if self.model.training and SAMPLING_LOGPS in inputs and training is not None:
            loss_mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            sums = sample_train_sums(inputs[SAMPLING_LOGPS], training, loss_mask)
            for name, value in sample_train_metrics(self.accelerator.reduce(sums, reduction="sum")).items():
                self._metrics["train"][name].append(value)
        self._loss_pass_logps = None
        return result


def trainer_class(args) -> type:
    if not args.dynamic_sampling:
        return SamplingKLTrainer
    from grpo_recipes.train.dynamic_sampling import DynamicSamplingTrainer

    return DynamicSamplingTrainer
