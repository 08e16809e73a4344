"""Reward registry: name -> factory, and the builder that turns YAML into TRL reward functions.

YAML (under `dataset.rewards`), one entry per reward; the key becomes the function's
`__name__`, so TRL logs it as `rewards/<key>/mean`:

    rewards:
      accuracy: {weight: 1.0, mode: binary}
      format:   {weight: 0.2, mode: soft}
      strict_fmt: {fn: format, weight: 0.1, mode: strict}   # same factory, second entry
      mine:     {fn: my_pkg.my_module.my_reward, weight: 0.5}  # any function by dotted path
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grpo_common.errors import ConfigError
from grpo_common.formats import reader
from grpo_common.templates import with_prefix
from rewards.accuracy import make_accuracy_reward, make_correct_and_format_reward
from rewards.code import TestSuite, make_code_reward
from rewards.common import is_number, judge_with
from rewards.format import make_format_reward
from rewards.shaping import (
    make_length_scaled_reward,
    make_repetition_reward,
    make_soft_overlong_reward,
    make_tag_count_reward,
)


@dataclass
class RewardContext:
    """What a factory may need from the run: the tasks' verifier, the prompt format's name and
    grpo.max_completion_length (the default L_max of soft_overlong; None where unknown)."""

    scorer: Callable[[str | None, Mapping[str, Any]], float]
    prompt_format: str
    max_completion_length: int | None = None
    # (texts, entries) -> [(Extraction, score)]: reads code for code tasks and scores a batch at once
    # (TaskSet.judge); None: the prompt format's answer chain + `scorer`, one answer at a time.
    judge: Callable[[list[str], list[Mapping[str, Any]]], list] | None = None
    # what the chat template pre-fills in the reply (e.g. "<think>\n"): rewards read prefix + completion
    response_prefix: str = ""
    # (reward kwargs, each completion's verdict) -> None: told every training batch's verdicts (the
    # curriculum's levels follow them); only the first reward that judges every completion calls it
    on_verdicts: Callable[[Mapping[str, Any], list[bool]], None] | None = None

    def __post_init__(self):
        if self.judge is None:
            self.judge = judge_with(
                self.scorer,
                reader(self.prompt_format, code_task=False),
                reader(self.prompt_format, code_task=True),
                is_code=lambda row: TestSuite.from_metadata(row.get("metadata")) is not None,
            )


# Rewards that judge every completion right or wrong: the first of them in dataset.rewards reports the
# verdicts to `RewardContext.on_verdicts`.
VERDICT_REWARDS = ("accuracy", "correct_and_format")

# name -> (factory(ctx, **params), accepted params with their choices or None for free values)
REWARDS: dict[str, tuple[Callable[..., Callable], dict[str, tuple | None]]] = {
    "accuracy": (
        lambda ctx, mode="binary": make_accuracy_reward(ctx.judge, mode, ctx.on_verdicts),
        {"mode": ("binary", "graded", "signed")},
    ),
    "format": (
        lambda ctx, mode="strict": make_format_reward(ctx.prompt_format, mode),
        {"mode": ("strict", "soft")},
    ),
    "correct_and_format": (
        lambda ctx, format_weight=0.1: make_correct_and_format_reward(
            ctx.judge, ctx.prompt_format, format_weight, ctx.on_verdicts
        ),
        {"format_weight": None},
    ),
    "tag_count": (lambda ctx: make_tag_count_reward(ctx.prompt_format), {}),
    "soft_overlong": (
        lambda ctx, max_length=None, cache=None: make_soft_overlong_reward(
            max_length, cache, ctx.max_completion_length
        ),
        {"max_length": None, "cache": None},
    ),
    "length_scaled": (
        lambda ctx, scope="batch": make_length_scaled_reward(ctx.judge, scope),
        {"scope": ("batch", "group")},
    ),
    "code_tests": (
        lambda ctx, base_weight=1.0, perfect_bonus=1.0, **moved: _code_reward(
            ctx, base_weight, perfect_bonus, moved
        ),
        {"base_weight": None, "perfect_bonus": None, "max_tests": None, "timeout": None},
    ),
    "repetition": (
        lambda ctx, ngram_size=3, max_penalty=-1.0: make_repetition_reward(ngram_size, max_penalty),
        {"ngram_size": None, "max_penalty": None},
    ),
}


def _code_reward(ctx: RewardContext, base_weight, perfect_bonus, moved: dict[str, Any]) -> Callable:
    if moved:  # the suite is the task's choice now, shared by training and eval
        key = min(moved)
        task_key = {"timeout": "test_timeout"}.get(key, key)
        raise ConfigError(
            f"dataset.rewards.code_tests.{key}: set it on the code task instead, "
            f"dataset.tasks.<task>.config.{task_key}, so that training and eval run the same tests"
        )
    return make_code_reward(ctx.judge, base_weight, perfect_bonus)


def _import_dotted(path: str) -> Callable:
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"reward function '{path}' could not be imported: {err}") from None
    if not callable(fn):
        raise ConfigError(f"reward function '{path}' is not callable")
    return fn


def _named(fn: Callable, name: str, ctx: RewardContext) -> Callable:
    """`fn` under its YAML name, reading each completion as the whole reply (`ctx.response_prefix`, set
    once the tokenizer is loaded, + the completion)."""

    def reward(*args, **kwargs):
        if ctx.response_prefix:
            if "completions" in kwargs:
                kwargs["completions"] = [with_prefix(c, ctx.response_prefix) for c in kwargs["completions"]]
            elif len(args) >= 2:
                args = (args[0], [with_prefix(c, ctx.response_prefix) for c in args[1]], *args[2:])
        return fn(*args, **kwargs)

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
        if "." in fn_name or ":" in fn_name:
            if params:
                raise ConfigError(
                    f"dataset.rewards.{key}: a dotted-path reward takes only 'weight', got {sorted(params)}"
                )
            fn = _import_dotted(fn_name)
        elif fn_name in REWARDS:
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
                fn = factory(reporter, **params)
                if fn_name in VERDICT_REWARDS and reporter.on_verdicts is not None:
                    reporter = dataclasses.replace(reporter, on_verdicts=None)
            except ConfigError as err:  # a factory's message names the reward; the user wrote `key`
                message = str(err).replace(f"dataset.rewards.{fn_name}", f"dataset.rewards.{key}", 1)
                raise ConfigError(message) from None
        else:
            close = difflib.get_close_matches(fn_name, list(REWARDS), n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(
                f"dataset.rewards: unknown reward '{fn_name}'.{hint} Known: {', '.join(sorted(REWARDS))}, "
                "or a dotted import path to your own function"
            )
        funcs.append(_named(fn, key, ctx))
        weights.append(float(weight))
    return funcs, weights
