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

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from grpo_recipes.errors import ConfigError
from rewards.accuracy import make_accuracy_reward, make_correct_and_format_reward
from rewards.format import make_format_reward


@dataclass
class RewardContext:
    """What a factory may need from the run: the tasks' verifier and the prompt format."""

    scorer: Callable[[str | None, Mapping[str, Any]], float]
    prompt_format: str


# name -> (factory(ctx, **params), accepted params with their choices or None for free values)
REWARDS: dict[str, tuple[Callable[..., Callable], dict[str, tuple | None]]] = {
    "accuracy": (lambda ctx, mode="binary": make_accuracy_reward(ctx.scorer, mode),
                 {"mode": ("binary", "graded", "signed")}),
    "format": (lambda ctx, mode="strict": make_format_reward(ctx.prompt_format, mode),
               {"mode": ("strict", "soft")}),
    "correct_and_format": (
        lambda ctx, format_weight=0.1: make_correct_and_format_reward(ctx.scorer, ctx.prompt_format, format_weight),
        {"format_weight": None},
    ),
}


def register_reward(name: str, factory: Callable[..., Callable], params: dict[str, tuple | None] | None = None):
    REWARDS[name] = (factory, params or {})


def _import_dotted(path: str) -> Callable:
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"reward function '{path}' could not be imported: {err}") from None
    if not callable(fn):
        raise ConfigError(f"reward function '{path}' is not callable")
    return fn


def _named(fn: Callable, name: str) -> Callable:
    def reward(*args, **kwargs):
        return fn(*args, **kwargs)

    reward.__name__ = reward.__qualname__ = name
    return reward


def build_rewards(spec: Mapping[str, Any], ctx: RewardContext) -> tuple[list[Callable], list[float]]:
    """Reward functions and their weights, in YAML order."""
    if not spec:
        raise ConfigError("dataset.rewards is empty: name at least one reward, e.g. accuracy: {weight: 1.0}")
    funcs, weights = [], []
    for key, params in spec.items():
        params = dict(params or {})
        weight = params.pop("weight", 1.0)
        if not isinstance(weight, (int, float)):
            raise ConfigError(f"dataset.rewards.{key}.weight must be a number, got {weight!r}")
        fn_name = params.pop("fn", key)
        if "." in fn_name or ":" in fn_name:
            if params:
                raise ConfigError(f"dataset.rewards.{key}: a dotted-path reward takes only 'weight', got {sorted(params)}")
            fn = _import_dotted(fn_name)
        elif fn_name in REWARDS:
            factory, accepted = REWARDS[fn_name]
            for p, value in params.items():
                if p not in accepted:
                    raise ConfigError(
                        f"dataset.rewards.{key}: unknown option '{p}'; '{fn_name}' accepts "
                        f"{', '.join(['weight', *accepted]) }"
                    )
                if accepted[p] is not None and value not in accepted[p]:
                    raise ConfigError(f"dataset.rewards.{key}.{p}={value!r}; accepted: {', '.join(accepted[p])}")
            fn = factory(ctx, **params)
        else:
            close = difflib.get_close_matches(fn_name, list(REWARDS), n=3, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(
                f"dataset.rewards: unknown reward '{fn_name}'.{hint} Known: {', '.join(sorted(REWARDS))}, "
                "or a dotted import path to your own function"
            )
        funcs.append(_named(fn, key))
        weights.append(float(weight))
    return funcs, weights


