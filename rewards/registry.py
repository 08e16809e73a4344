"""Reward registry: name -> factory, and `build_rewards`, which turns `dataset.rewards` into TRL reward
functions named by their keys (TRL logs `rewards/<key>/mean`), importing only the factories a run uses;
and what every reward needs: the text of a completion, the task entry it answers."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from grpo_common.errors import ConfigError, did_you_mean, is_number
from grpo_common.formats import reader
from grpo_common.templates import with_prefix
from rewards.guard import RewardFaults


def completion_text(completion: Any) -> str:
    """A plain string, or for chat prompts a list of messages: then the answer is the last assistant turn's
    (with tools, TRL can end a rollout on a tool result, whose text is not the model's)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        last = next((m for m in reversed(completion) if m.get("role") == "assistant"), completion[-1])
        return str(last.get("content", ""))
    return "" if completion is None else str(completion)


def entries(kwargs: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Rebuild each completion's task entry from the dataset columns TRL hands to rewards."""
    return [
        {c: kwargs[c][i] for c in ("question", "answer", "metadata", "task") if c in kwargs} for i in range(n)
    ]


@dataclass
class RewardContext:
    """What a factory may need from the run."""

    scorer: Callable[[str | None, Mapping[str, Any]], float]  # the tasks' verifier
    prompt_format: str
    max_completion_length: int | None = None  # soft_overlong's default L_max (None: unknown)
    # (texts, entries) -> [(Extraction, score)], a batch at once (TaskSet.judge); None: `read_and_score`
    judge: Callable[[list[str], list[Mapping[str, Any]]], list] | None = None
    response_prefix: str = ""  # the chat template's pre-fill (e.g. "<think>\n"): rewards read it + completion
    # (reward kwargs, verdicts) -> None: told each training batch's verdicts (the curriculum's levels follow
    # them); only the first reward that judges every completion calls it
    on_verdicts: Callable[[Mapping[str, Any], list[bool]], None] | None = None
    faults: RewardFaults = field(default_factory=RewardFaults)  # every reward's failed calls (guard.py)

    def __post_init__(self):
        self.judge = self.judge or self.read_and_score

    def read_and_score(self, texts: list[str], rows: list[Mapping[str, Any]]) -> list:
        """The prompt format's answer chain (its code reader for a code task) + `scorer`, one at a time."""
        from rewards.code import TestSuite

        code = [TestSuite.from_metadata(row.get("metadata")) is not None for row in rows]
        found = [reader(self.prompt_format, c).extract(t) for t, c in zip(texts, code)]
        return [(e, self.scorer(e.answer, row)) for e, row in zip(found, rows)]


# Rewards that judge every completion: the first in dataset.rewards reports to `RewardContext.on_verdicts`.
VERDICT_REWARDS = ("accuracy", "correct_and_format")

# name -> (rewards.<module>:<factory>, `factory(ctx, **options) -> reward`; the options with their choices, or
# None for free values)
REWARDS: dict[str, tuple[str, dict[str, tuple | None]]] = {
    "accuracy": ("accuracy:accuracy", {"mode": ("binary", "graded", "signed")}),
    "format": ("accuracy:format_reward", {"mode": ("strict", "soft")}),
    "correct_and_format": ("accuracy:correct_and_format", {"format_weight": None}),
    "tag_count": ("shaping:tag_count", {}),
    "soft_overlong": ("shaping:soft_overlong", {"max_length": None, "cache": None}),
    "length_scaled": ("shaping:length_scaled", {"scope": ("batch", "group")}),
    "code_tests": (
        "code:code_tests",
        dict.fromkeys(["base_weight", "perfect_bonus", "max_tests", "timeout"]),
    ),
    "repetition": ("shaping:repetition", {"ngram_size": None, "max_penalty": None}),
    "tool_format": ("tool_use:tool_format", {}),
    "tool_errors": ("tool_use:tool_errors", {}),
}


def _import_dotted(path: str) -> Callable:
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"reward function '{path}' could not be imported: {err}") from None
    if not callable(fn):
        raise ConfigError(f"reward function '{path}' is not callable")
    return fn


def _check_signature(fn: Callable, key: str) -> None:
    """A reward that can never accept TRL's call is refused before anything loads, in one line."""
    import inspect

    # What TRL passes every reward (GRPOTrainer._calculate_rewards; environments= with env=), then columns.
    trl = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
    trl += ("environments",)
    columns = ("question", "answer", "task", "metadata")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    try:
        sig.bind(**dict.fromkeys([*trl, *columns]))
    except TypeError as err:
        raise ConfigError(
            f"dataset.rewards.{key}: {getattr(fn, '__qualname__', fn)}{sig} cannot take TRL's call ({err}); "
            f"rewards are called by keyword with {', '.join(trl)} and the columns "
            f"{', '.join(columns)}: add **kwargs for the ones it does not read"
        ) from None


def _named(fn: Callable, name: str, ctx: RewardContext) -> Callable:
    """`fn` under its YAML name, reading each completion as the whole reply (`ctx.response_prefix`, set once
    the tokenizer is loaded, + the completion); a failing call scores None and is recorded (guard.py)."""

    def reward(**kwargs):
        if prefix := ctx.response_prefix:
            kwargs["completions"] = [with_prefix(c, prefix) for c in kwargs["completions"]]
        return ctx.faults.call(fn, name, kwargs)

    reward.__name__ = reward.__qualname__ = name
    return reward


def build_rewards(spec: Mapping[str, Any], ctx: RewardContext) -> tuple[list[Callable], list[float]]:
    """Reward functions and their weights, in YAML order."""
    if not spec or all(v is None for v in spec.values()):
        raise ConfigError("dataset.rewards is empty: name at least one reward, e.g. accuracy: {weight: 1.0}")
    funcs, weights = [], []
    reporter = ctx  # the context of the reward that reports verdicts; later ones get none (no double count)
    for key, params in spec.items():
        if params is None:  # `accuracy: null` removes a reward a dataset inherited from base.yaml
            continue
        params = dict(params)
        weight = params.pop("weight", 1.0)
        if not is_number(weight):  # as grpo_recipes' config check: `weight=true` is a mistake, not 1.0
            raise ConfigError(
                f"dataset.rewards.{key}.weight must be a number: an int or a float (not a bool, NaN or inf), "
                f"got {weight!r}"
            )
        fn_name = params.pop("fn", key)
        if fn_name in REWARDS:
            factory, accepted = REWARDS[fn_name]
            for p, value in params.items():
                if p not in accepted:
                    raise ConfigError(
                        f"dataset.rewards.{key}: unknown option '{p}'; '{fn_name}' accepts "
                        f"{', '.join(['weight', *accepted])}"
                    )
                if accepted[p] is not None and value not in accepted[p]:
                    raise ConfigError(
                        f"dataset.rewards.{key}.{p}={value!r}; accepted: {', '.join(accepted[p])}"
                    )
            try:
                fn = _import_dotted(f"rewards.{factory}")(reporter, **params)
            except ConfigError as err:  # a factory's message names the reward; the user wrote `key`
                message = str(err).replace(f"dataset.rewards.{fn_name}", f"dataset.rewards.{key}", 1)
                raise ConfigError(message) from None
            if fn_name in VERDICT_REWARDS and reporter.on_verdicts is not None:
                reporter = replace(reporter, on_verdicts=None)
        elif "." in fn_name or ":" in fn_name:
            if params:
                raise ConfigError(
                    f"dataset.rewards.{key}: a dotted-path reward takes only 'weight', got {sorted(params)}"
                )
            fn = _import_dotted(fn_name)
            _check_signature(fn, key)
        else:
            hint = did_you_mean(fn_name, REWARDS, cutoff=0.5)
            raise ConfigError(
                f"dataset.rewards: unknown reward '{fn_name}'.{hint} Known: {', '.join(sorted(REWARDS))}, "
                "or a dotted import path to your own function"
            )
        funcs.append(_named(fn, key, ctx))
        weights.append(float(weight))
    return funcs, weights
