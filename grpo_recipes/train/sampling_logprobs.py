"""The log-prob of each sampled token under the distribution generate drew it from, recorded while
`model.generate` runs (TRL's transformers path returns no sampling log-probs; its vLLM path does).

A logits processor passed to `generate` runs after generate's own processors (repetition penalty,
...) but before its sampling warpers (temperature, top-k, top-p, min-p), so the observer applies the
same warpers to a copy of the scores; generate's scores go on unchanged, and so does sampling. Each
call sees the token chosen at the previous step as the last column of `input_ids`: only one step's
scores are kept, never the [steps, batch, vocab] tensor that `output_scores=True` would hold.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

log = logging.getLogger(__name__)


def sampling_warpers(config, fallback=None) -> LogitsProcessorList | None:
    """The warpers generate applies when sampling with `config` (transformers' order), or None when the
    sampled distribution is not one this module reproduces (greedy, beams, other warpers)."""

    def value(name: str) -> Any:  # generate fills a config's unset (None) fields from the model's
        v = getattr(config, name, None)
        return getattr(fallback, name, None) if v is None and fallback is not None else v

    if not value("do_sample") or (value("num_beams") or 1) > 1 or value("watermarking_config") is not None:
        return None
    if value("top_h") is not None or (value("typical_p") or 1.0) < 1.0:
        return None
    if 0.0 < (value("epsilon_cutoff") or 0.0) < 1.0 or 0.0 < (value("eta_cutoff") or 0.0) < 1.0:
        return None
    warpers = LogitsProcessorList()
    if value("temperature") is not None and value("temperature") != 1.0:
        warpers.append(TemperatureLogitsWarper(value("temperature")))
    if value("top_k") is not None and value("top_k") != 0:
        warpers.append(TopKLogitsWarper(top_k=value("top_k")))
    if value("top_p") is not None and value("top_p") < 1.0:
        warpers.append(TopPLogitsWarper(top_p=value("top_p")))
    if value("min_p") is not None:
        warpers.append(MinPLogitsWarper(min_p=value("min_p")))
    return warpers


class ChosenTokenLogprobs(LogitsProcessor):
    """Observes generate: records log p(chosen token) under the warped distribution, returns the scores
    untouched."""

    def __init__(self, warpers: LogitsProcessorList):
        self.warpers = warpers
        self.steps: list[torch.Tensor] = []
        self.last: tuple[torch.Tensor, torch.Tensor] | None = None  # the latest step's scores, logsumexp

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.last is not None:  # the previous step's token is now the last input id
            self.steps.append(self._chosen(input_ids[:, -1]))
        warped = self.warpers(input_ids, scores) if len(self.warpers) else scores
        self.last = (warped, torch.logsumexp(warped.float(), dim=-1))
        return scores

    def _chosen(self, tokens: torch.Tensor) -> torch.Tensor:
        warped, lse = self.last
        return warped.float().gather(1, tokens.unsqueeze(1)).squeeze(1) - lse

    def logprobs(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(batch, n) log-probs of the n generated tokens (generate may have run a step it then undid)."""
        n = new_tokens.size(1)
        steps = self.steps[:n]
        if len(steps) < n and self.last is not None:
            steps.append(self._chosen(new_tokens[:, len(steps)]))
        if len(steps) < n:
            raise RuntimeError(f"recorded {len(steps)} sampling steps for {n} generated tokens")
        if not steps:
            return torch.zeros((new_tokens.size(0), 0), device=new_tokens.device)
        return torch.stack(steps, dim=1)


class SamplingLogprobRecorder:
    """Wraps a model's `generate`; while `recording()`, each call's sampled-token log-probs are kept in
    `logprobs` ((batch, new tokens), or None when they could not be recorded). Outside it (the fixed
    eval, for one) generate runs as it was."""

    def __init__(self):
        self.active = False
        self.logprobs: torch.Tensor | None = None
        self.why_not: str | None = None

    @contextlib.contextmanager
    def recording(self):
        self.active, self.logprobs, self.why_not = True, None, None
        try:
            yield self
        finally:
            self.active = False

    def wrap(self, model) -> None:
        generate = model.generate

        @functools.wraps(generate)
        def generate_recording(*args, **kwargs):
            if not self.active:
                return generate(*args, **kwargs)
            warpers = sampling_warpers(kwargs.get("generation_config"), model.generation_config)
            input_ids = kwargs.get("input_ids")
            if warpers is None or args or input_ids is None or kwargs.get("logits_processor"):
                self.why_not = "generate is not plain sampling with input_ids (greedy, beams, other warpers)"
                return generate(*args, **kwargs)
            observer = ChosenTokenLogprobs(warpers)
            out = generate(*args, logits_processor=LogitsProcessorList([observer]), **kwargs)
            sequences = out if isinstance(out, torch.Tensor) else out.sequences
            self.logprobs = observer.logprobs(sequences[:, input_ids.size(1) :])
            return out

        model.generate = generate_recording
