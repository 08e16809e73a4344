"""From the composed Hydra config (a plain dict) to GRPOConfig keyword arguments, and TRL's own
check of them.

- The `grpo` group holds GRPOConfig fields; every field is reachable, an unknown key is an
  error naming the key (field names change between TRL versions). Recipe-only switches
  (RECIPE_KEYS) are read by the recipe and never reach TRL.
- Common knobs live at the top level (`max_steps=100`) and are copied in here.
- The hardware (hardware.py) decides precision: GPU -> bf16 where supported; CPU -> use_cpu, with
  bf16 autocast where the CPU computes bf16 natively, fp32 otherwise. A setting that cannot work
  on this hardware is an error.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from grpo_common.errors import ConfigError
from grpo_recipes.config.checks import SCHEMA, check_batch, show
from grpo_recipes.models.hardware import Hardware, apply_hardware, detect_hardware

# Top-level knobs that are GRPOConfig fields: `python train_grpo.py max_steps=100`.
COMMON_KNOBS = ("max_steps", "learning_rate", "seed", "run_name", "output_dir", "report_to")
SWITCHES = ("use_vllm",)
# Keys of the grpo group read by the recipe, not by TRL (fast_paths.py, no_signal.py, dynamic_sampling.py).
RECIPE_KEYS = ("fast_paths", "no_signal_warning", "dynamic_sampling", "dynamic_sampling_max_draws")


def grpo_field_names() -> set[str]:
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


def build_grpo_kwargs(
    cfg: dict[str, Any], hw: Hardware, reward_weights: list[float] | None = None
) -> dict[str, Any]:
    grpo = {k: v for k, v in (cfg.get("grpo") or {}).items() if k not in RECIPE_KEYS}
    for knob in COMMON_KNOBS:
        if knob in grpo:
            raise ConfigError(
                f"grpo.{knob} is a top-level knob here: set `{knob}=...` instead of `grpo.{knob}=...`"
            )
        grpo[knob] = cfg[knob]
    fields = grpo_field_names()
    for key in grpo:
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ConfigError(f"grpo.{key}: not a GRPOConfig field of the installed TRL.{hint}")
    # Switches that may be turned on at the top level (`use_vllm=true`) or inside a grpo preset.
    for switch in SWITCHES:
        grpo[switch] = bool(cfg.get(switch)) or bool(grpo.get(switch))
    if isinstance(grpo.get("report_to"), str):
        grpo["report_to"] = [grpo["report_to"]]

    apply_hardware(grpo, hw)
    check_batch(grpo, hw.world_size)
    if reward_weights is not None:
        if grpo.get("reward_weights") is not None:
            raise ConfigError(
                "grpo.reward_weights: set each reward's weight under dataset.rewards.<name>.weight"
            )
        grpo["reward_weights"] = reward_weights
    return grpo


def check_trainer_config(cfg: dict[str, Any], hw: Hardware | None = None) -> None:
    """The GRPOConfig this config builds, checked as TRL would: the last stage of the config check."""
    rewards = [r for r in (cfg["dataset"].get("rewards") or {}).values() if r is not None]
    hw = hw or detect_hardware()
    grpo = build_grpo_kwargs(cfg, hw, reward_weights=[1.0] * len(rewards))
    build_grpo_config({**grpo, "activation_checkpointing": bool(grpo.get("activation_checkpointing"))})
    from transformers.integrations import get_reporting_integration_callbacks

    from grpo_recipes.models.lora import quantization_config

    try:
        get_reporting_integration_callbacks([r for r in grpo["report_to"] if r not in ("none", "all")])
    except ValueError as err:
        raise ConfigError(f"report_to={show(cfg['report_to'])}: {str(err).strip()}") from None
    quantization_config(cfg["model"].get("lora"), hw.gpu)  # QLoRA: a GPU and bitsandbytes


def build_grpo_config(grpo: dict[str, Any]):
    """GRPOConfig(**grpo), after checking every field against the type TRL declares for it; TRL's own
    rules (its __post_init__) as one ConfigError naming the key."""
    import typing

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    for key, value in grpo.items():  # the keys in checks.SCHEMA are checked there, by the recipe's rules
        if f"grpo.{key}" not in SCHEMA and key in hints and not _matches(value, hints[key]):
            raise ConfigError(
                f"grpo.{key}={show(value)}: expected {_type_name(hints[key])} (GRPOConfig's type)"
            )
    if grpo.get("activation_checkpointing") is None:  # TRL would read None as its own default, on
        raise ValueError(
            "activation_checkpointing must be resolved first (hardware.resolve_activation_checkpointing)"
        )
    try:
        return GRPOConfig(**grpo)
    except (ValueError, TypeError) as err:
        raise ConfigError(name_the_key(str(err), grpo)) from None


def name_the_key(message: str, grpo: dict[str, Any]) -> str:
    """TRL's and transformers' messages name a field or quote a value: put the grpo key it is about in
    front."""
    message = message.strip().splitlines()[0]
    named = [k for k in grpo if re.search(rf"\b{re.escape(k)}\b", message)]
    named = named or [k for k, v in grpo.items() if isinstance(v, str) and len(v) > 2 and v in message]
    return f"{f'grpo.{named[0]}={show(grpo[named[0]])}' if named else 'grpo'}: {message}"


def _matches(value: Any, tp: Any) -> bool:
    """Exact typing: an int is a float, a bool is not an int; unknown classes pass (TRL checks them)."""
    import enum
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple) or tp in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(_matches(v, args[0]) for v in value))
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value in {e.value for e in tp}
    return True


def _type_name(tp: Any) -> str:
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")
