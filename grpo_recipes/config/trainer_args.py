"""From the composed config to the run's GRPOConfig, checked as TRL checks it. The `grpo` group takes
every GRPOConfig field (an unknown one is named), common knobs are copied in from the top level, the
hardware decides precision (hardware.py), and the recipe's own knobs extend GRPOConfig as open-r1
extends it (`RecipeGRPOConfig`)."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import types
import typing
from typing import Any

from trl import GRPOConfig

from grpo_common.errors import ConfigError, did_you_mean
from grpo_recipes.config.checks import check_batch
from grpo_recipes.config.grpo_knobs import RecipeGRPOFields
from grpo_recipes.config.knobs import SCHEMA
from grpo_recipes.config.values import show
from grpo_recipes.models.hardware import (
    Hardware,
    apply_hardware,
    check_generation_cast,
    default_generation_cache,
    detect_hardware,
)

# Top-level knobs that are GRPOConfig fields: `python train_grpo.py max_steps=100`.
COMMON_KNOBS = ("max_steps", "learning_rate", "seed", "run_name", "output_dir", "report_to", "use_vllm")


@dataclasses.dataclass
class RecipeGRPOConfig(GRPOConfig, RecipeGRPOFields):
    """TRL's GRPOConfig with the recipe's own knobs as fields."""


def build_grpo_kwargs(
    cfg: dict[str, Any], hw: Hardware, reward_weights: list[float] | None = None
) -> dict[str, Any]:
    grpo = dict(cfg.get("grpo") or {})
    for knob in COMMON_KNOBS:
        if knob in grpo:
            raise ConfigError(
                f"grpo.{knob} is a top-level knob here: set `{knob}=...` instead of `grpo.{knob}=...`"
            )
        grpo[knob] = cfg[knob]
    fields = {f.name for f in dataclasses.fields(RecipeGRPOConfig) if f.init}
    for key in grpo:
        if key not in fields:
            hint = did_you_mean(key, sorted(fields))
            raise ConfigError(f"grpo.{key}: not a GRPOConfig field of the installed TRL.{hint}")
    if isinstance(grpo.get("report_to"), str):
        grpo["report_to"] = [grpo["report_to"]]

    apply_hardware(grpo, hw)
    multi_turn = bool(cfg["tools"]["names"]) or cfg["env"]["name"] is not None
    default_generation_cache(grpo, hw, cfg["model"]["lora"]["enabled"], multi_turn)
    check_batch(grpo, hw.world_size)
    if reward_weights is not None:
        if grpo.get("reward_weights") is not None:
            raise ConfigError(
                "grpo.reward_weights: set each reward's weight under dataset.rewards.<name>.weight"
            )
        grpo["reward_weights"] = reward_weights
    return grpo


# The GRPOConfig the command-line check built for each config it checked (preflight.py, in this process):
# the job that runs the config takes it instead of checking and building again.
_BUILT: dict[str, Any] = {}


def _key(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, sort_keys=True, default=str)


def checked_here(cfg: dict[str, Any]) -> bool:
    """Whether the command-line check already checked this very config in this process."""
    return _key(cfg) in _BUILT


def take_checked_args(cfg: dict[str, Any]):
    """The GRPOConfig the command-line check built for this very config, or None (a search's values...)."""
    return _BUILT.pop(_key(cfg), None)


def check_trainer_config(cfg: dict[str, Any], reward_weights: list[float]) -> None:
    """The GRPOConfig this config builds, checked as TRL would: the last stage of the config check. Kept for
    the job (take_checked_args)."""
    hw = detect_hardware()
    grpo = build_grpo_kwargs(cfg, hw, reward_weights)
    args = build_grpo_config(grpo)
    check_generation_cast(cfg["model"], args)
    prompts = args.generation_batch_size // args.num_generations  # TRL's sampler drops a partial batch
    if cfg["dataset"]["train_size"] < prompts:
        raise ConfigError(
            f"dataset.train_size={cfg['dataset']['train_size']}: each generation draws {prompts} distinct "
            f"prompts ({args.generation_batch_size} completions / grpo.num_generations "
            f"{args.num_generations}), so nothing would be trained; give at least {prompts}"
        )
    # Under DeepSpeed, TrainingArguments point a global at their ZeRO config (HfDeepSpeedConfig): kept
    # alive, ZeRO-3 would partition the weights as from_pretrained loads them. The job builds its own.
    _BUILT[_key(cfg)] = None if args.deepspeed_plugin is not None else args
    from transformers.integrations import get_reporting_integration_callbacks

    from grpo_recipes.models.loading import quantization_config

    try:
        get_reporting_integration_callbacks([r for r in grpo["report_to"] if r not in ("none", "all")])
    except ValueError as err:
        raise ConfigError(f"report_to={show(cfg['report_to'])}: {str(err).strip()}") from None
    quantization_config(cfg["model"]["lora"], hw.gpu)  # QLoRA: a GPU and bitsandbytes


def build_grpo_config(grpo: dict[str, Any]):
    """GRPOConfig(**grpo), after checking every field against the type TRL declares for it; TRL's own
    rules (its __post_init__) as one ConfigError naming the key. `activation_checkpointing: null` (auto)
    stays off until the model is loaded (assemble.get_training_args)."""
    if grpo.get("activation_checkpointing") is None and grpo.get("gradient_checkpointing") is None:
        grpo = {**grpo, "activation_checkpointing": False}  # not None: TRL would read None as its default, on

    hints = typing.get_type_hints(RecipeGRPOConfig)
    for key, value in grpo.items():  # the declared keys are checked by their declaration (checks.py)
        if f"grpo.{key}" not in SCHEMA and key in hints and not _matches(value, hints[key]):
            name = str(hints[key]).replace("typing.", "").replace("<class '", "").replace("'>", "")
            raise ConfigError(f"grpo.{key}={show(value)}: expected {name} (GRPOConfig's type)")
    supported = supported_values(RecipeGRPOConfig, "loss_type")  # TRL checks it only once training starts
    if supported and grpo.get("loss_type", supported[0]) not in supported:
        raise ConfigError(
            f"grpo.loss_type={show(grpo['loss_type'])}: expected one of: {', '.join(supported)}"
        )
    try:
        return RecipeGRPOConfig(**grpo)
    except (ValueError, TypeError) as err:
        raise ConfigError(name_the_key(str(err), grpo)) from None


def supported_values(config_class: type, name: str) -> list[str]:
    """The values TRL's help for field `name` lists ("Supported values are 'a', 'b', and 'c'."), or []."""
    help_text = next(f for f in dataclasses.fields(config_class) if f.name == name).metadata.get("help", "")
    match = re.search(r"Supported values are (.*?)\.\s", help_text)
    return re.findall(r"'([^']+)'", match.group(1)) if match else []


def name_the_key(message: str, grpo: dict[str, Any]) -> str:
    """TRL's and transformers' messages name a field or quote a value: put the grpo key it is about in
    front."""
    message = message.strip().splitlines()[0]
    named = [k for k in grpo if re.search(rf"\b{re.escape(k)}\b", message)]
    named = named or [k for k, v in grpo.items() if isinstance(v, str) and len(v) > 2 and v in message]
    return f"{f'grpo.{named[0]}={show(grpo[named[0]])}' if named else 'grpo'}: {message}"


def _matches(value: Any, tp: Any) -> bool:
    """Exact typing: an int is a float, a bool is not an int; unknown classes pass (TRL checks them)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if tp is type(None):
        return value is None
    if tp in (bool, int, float, str):
        not_bool = tp is bool or not isinstance(value, bool)
        return not_bool and isinstance(value, (int, float) if tp is float else tp)
    if origin in (list, tuple) or tp in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(_matches(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value in {e.value for e in tp}
    return True
