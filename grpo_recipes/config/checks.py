"""The value check: every knob a user can set, its type and range, checked before anything is
loaded or written. Import-light (no torch, TRL or reasoning-gym), so a mistake costs a second.

Types are exact: no silent coercion of 1.5 to an int, of `maybe` to a bool, or of `abc` to a
number. GRPOConfig fields outside the table below are type-checked against TRL's own dataclass,
and TRL's own `__post_init__` rules are applied by building the config (`grpo_recipes.config.trainer_args`).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_common.errors import ConfigError
from grpo_recipes.config.trl_names import MODEL_FIELDS, trl_hint

DTYPE_NAMES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")


@dataclass(frozen=True)
class Value:
    """What one key accepts: a kind, an optional range or set of choices, and whether null is allowed."""

    kind: str  # int | float | bool | str | name | path | list | dict | str_or_list | any
    low: float | None = None  # inclusive
    high: float | None = None  # inclusive
    above: float | None = None  # exclusive
    below: float | None = None  # exclusive
    choices: tuple | None = None
    optional: bool = False
    item: Value | None = None  # lists: what each element accepts

    def describe(self) -> str:
        if self.choices is not None:
            text = "one of: " + ", ".join(show(c) for c in self.choices)
        else:
            text = {
                "int": "an integer",
                "float": "a number",
                "bool": "true or false",
                "str": "a string",
                "name": "a non-empty name without '/' (a directory name)",
                "path": "a non-empty path",
                "list": "a list",
                "dict": "a mapping",
                "str_or_list": "a string or a list of strings",
                "any": "any value",
            }[self.kind]
            bounds = [
                f">= {_num(self.low)}" if self.low is not None else "",
                f"> {_num(self.above)}" if self.above is not None else "",
                f"<= {_num(self.high)}" if self.high is not None else "",
                f"< {_num(self.below)}" if self.below is not None else "",
            ]
            text += " " + " and ".join(b for b in bounds if b) if any(bounds) else ""
            if self.item is not None:
                text += f" of items each {self.item.describe()}"
        return text + (", or null" if self.optional else "")

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.choices is not None:
            return any(value == c and type(value) is type(c) for c in self.choices)
        if not _is_kind(value, self.kind):
            return False
        if self.kind in ("int", "float"):
            return (
                (self.low is None or value >= self.low)
                and (self.high is None or value <= self.high)
                and (self.above is None or value > self.above)
                and (self.below is None or value < self.below)
            )
        if self.item is not None:
            return all(self.item.accepts(v) for v in value)
        return True


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":  # an integer is a number too (`learning_rate=1`); a bool, NaN and inf are not
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "path":
        return isinstance(value, str) and bool(value.strip())
    if kind == "name":
        return (
            isinstance(value, str) and value.strip() not in ("", ".", "..") and not {"/", "\\"} & set(value)
        )
    if kind == "list":
        return isinstance(value, (list, tuple))
    if kind == "dict":
        return isinstance(value, Mapping)
    if kind == "str_or_list":
        return isinstance(value, str) or (
            isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        )
    return True


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def show(value: Any) -> str:
    """A value as the user would type it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value) if value == "" or value.strip() != value else value
    return str(value)


def Int(low=None, **kw) -> Value:
    return Value("int", low=low, **kw)


def Float(low=None, **kw) -> Value:
    return Value("float", low=low, **kw)


def Choice(*choices, optional=False) -> Value:
    return Value("any", choices=choices, optional=optional)


BOOL, STR, OPT_STR = Value("bool"), Value("str"), Value("str", optional=True)
COUNT, STEPS = Int(1), Int(0)  # a positive count; a step number or a count that may be zero
PROB = Float(0, high=1)

# Every key of the closed groups, and the GRPOConfig fields this recipe sets or documents.
# A key missing from a closed group is an error (with close matches); the grpo group is open to
# every GRPOConfig field (checked against TRL's dataclass when it is built).
SCHEMA: dict[str, Value] = {
    # top-level knobs
    "max_steps": COUNT,
    "learning_rate": Float(above=0),
    "seed": Int(0),
    "run_name": Value("name"),
    "output_root": Value("path"),
    "output_dir": STR,
    "resume": Choice(True, False, "auto"),
    "use_vllm": BOOL,
    "eval_only": BOOL,
    "report_to": Value("str_or_list"),
    "log_samples_every": STEPS,
    "log_samples_count": COUNT,
    "optimized_metric": STR,
    # eval
    "eval.size": COUNT,
    "eval.seed": Int(0),
    "eval.every_n_steps": STEPS,
    "eval.batch_size": COUNT,
    "eval.max_new_tokens": Int(1, optional=True),
    "eval.do_sample": BOOL,
    "eval.temperature": Float(above=0),
    "eval.print_examples": STEPS,
    "eval.pass_k.samples": STEPS,
    "eval.pass_k.temperature": Float(above=0),
    "eval.pass_k.k": Value("list", item=COUNT),
    # model
    "model.name": STR,
    "model.path": STR,
    "model.dtype": Choice(*DTYPE_NAMES),
    "model.attn_implementation": OPT_STR,
    "model.chat_template": OPT_STR,
    "model.response_prefix": Value("str", optional=True),
    "model.lora.enabled": BOOL,
    "model.lora.r": COUNT,
    "model.lora.alpha": Float(above=0),
    "model.lora.dropout": Float(0, below=1),
    "model.lora.target_modules": Value("str_or_list"),
    "model.lora.merge_on_save": BOOL,
    "model.lora.quantize": Choice("4bit", "8bit", optional=True),
    # dataset (tasks and rewards are checked by their registries)
    "dataset.name": STR,
    "dataset.prompt_format": STR,
    "dataset.system_prompt": OPT_STR,
    "dataset.few_shot": Value("list", optional=True),
    "dataset.train_size": COUNT,
    "dataset.seed": Int(0),
    "dataset.tasks": Value("dict"),
    "dataset.rewards": Value("dict"),
    "dataset.curriculum.enabled": BOOL,
    "dataset.curriculum.start_level": STEPS,
    "dataset.curriculum.raise_at": PROB,
    "dataset.curriculum.lower_at": PROB,
    "dataset.curriculum.window": COUNT,
    "dataset.curriculum.eval_per_level": STEPS,
    # sandbox
    "sandbox.timeout": Float(above=0),
    "sandbox.memory_mb": COUNT,
    "sandbox.max_output_kb": COUNT,
    "sandbox.max_processes": COUNT,
    "sandbox.disk_mb": COUNT,
    "sandbox.workers": Int(1, optional=True),
    "sandbox.isolation": Choice("full", "basic"),
    "sandbox.read_paths": Value("list", item=STR),
    "sandbox.languages": Value("dict"),
    # GRPOConfig fields: counts, probabilities and coefficients TRL leaves unchecked
    "grpo.num_generations": Int(2),
    "grpo.per_device_train_batch_size": COUNT,
    "grpo.gradient_accumulation_steps": COUNT,
    "grpo.max_completion_length": COUNT,
    "grpo.steps_per_generation": Int(1, optional=True),
    "grpo.generation_batch_size": Int(1, optional=True),
    "grpo.num_iterations": COUNT,
    "grpo.temperature": Float(above=0),
    "grpo.top_p": Float(above=0, high=1),
    "grpo.top_k": STEPS,
    "grpo.min_p": Float(0, high=1, optional=True),
    "grpo.repetition_penalty": Float(above=0),
    "grpo.beta": Float(0),
    "grpo.epsilon": Float(0),
    "grpo.epsilon_high": Float(0, optional=True),
    "grpo.delta": Float(above=0, optional=True),
    "grpo.max_grad_norm": Float(0),
    "grpo.weight_decay": Float(0),
    "grpo.warmup_steps": Float(0),
    "grpo.logging_steps": Float(above=0),
    "grpo.save_steps": Float(above=0),
    "grpo.save_total_limit": Int(1, optional=True),
    "grpo.activation_checkpointing": Value("bool", optional=True),
    "grpo.gradient_checkpointing": Value("bool", optional=True),
    "grpo.bf16": Value("bool", optional=True),
    "grpo.fp16": BOOL,
    "grpo.lr_scheduler_type": STR,
    "grpo.save_strategy": STR,
    # choices TRL 1.16 checks only once training has started (GRPOTrainer), minutes into a run
    "grpo.loss_type": Choice("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo"),
    "grpo.scale_rewards": Choice("group", "batch", "none", True, False),
    "grpo.importance_sampling_level": Choice("token", "sequence"),
    "grpo.vllm_mode": Choice("server", "colocate"),
    "grpo.mask_truncated_completions": BOOL,
    "grpo.fast_paths": Choice("auto", True, False),
    "grpo.no_signal_warning": STEPS,
    "grpo.dynamic_sampling": BOOL,
    "grpo.dynamic_sampling_max_draws": COUNT,
    "grpo.vllm_gpu_memory_utilization": Float(above=0, high=1),
}
# Groups whose every key is in SCHEMA (and required); "" is the top level. grpo is open to TRL's fields.
CLOSED_GROUPS = ("", "dataset", "dataset.curriculum", "eval", "eval.pass_k", "model", "model.lora", "sandbox")
GROUPS = ("dataset", "eval", "grpo", "model", "sandbox")


def check_values(cfg: Mapping[str, Any], world_size: int | None = None) -> None:
    """Raise ConfigError on the first key whose value is not accepted (cfg: the resolved config)."""
    for key, spec in SCHEMA.items():
        found, value = _lookup(cfg, key)
        if not found and not key.startswith("grpo."):
            raise ConfigError(f"{key}: missing; expected {spec.describe()}")
        if found and not spec.accepts(value):
            raise ConfigError(f"{key}={show(value)}: expected {spec.describe()}")
    for group in CLOSED_GROUPS:
        found, section = _lookup(cfg, group) if group else (True, cfg)
        if found and isinstance(section, Mapping):
            prefix = f"{group}." if group else ""
            known = {k[len(prefix) :].split(".")[0] for k in SCHEMA if k.startswith(prefix)} | (
                set() if group else set(GROUPS)
            )
            for key in section:
                if key not in known:
                    raise ConfigError(unknown_key_message(f"{prefix}{key}", sorted(known)))
    if (cfg.get("grpo") or {}).get("eval_strategy", "no") != "no":
        raise ConfigError(
            f"grpo.eval_strategy={show(cfg['grpo']['eval_strategy'])}: the recipe runs its own fixed "
            "eval (eval.every_n_steps); TRL's eval loop stays off (no)"
        )
    for name, spec in (cfg.get("dataset", {}).get("rewards") or {}).items():
        weight = spec.get("weight", 1.0) if isinstance(spec, Mapping) else None
        if spec is not None and not (isinstance(spec, Mapping) and Float().accepts(weight)):
            raise ConfigError(
                f"dataset.rewards.{name}: expected {{weight: <number>, ...options}} or null, got {show(spec)}"
            )
    check_batch(cfg.get("grpo") or {}, world_size or int(os.environ.get("WORLD_SIZE", "1")))
    check_optimized_metric(cfg)


# The fixed eval's metrics a sweeper may optimize (overall, or `<task>/<metric>`), and pass@<k>.
OBJECTIVES = ("accuracy", "mean_score", "format", "mean_length", "truncated")


def check_optimized_metric(cfg: Mapping[str, Any]) -> None:
    """optimized_metric names a metric the final fixed eval reports."""
    name = cfg.get("optimized_metric")
    tasks = list((cfg.get("dataset") or {}).get("tasks") or {})
    pass_k = (cfg.get("eval") or {}).get("pass_k") or {}
    ks = [k for k in pass_k.get("k") or [] if k <= (pass_k.get("samples") or 0)]
    metrics = [*OBJECTIVES, *(f"pass@{k}" for k in ks)]
    accepted = metrics + [f"{t}/{m}" for t in tasks for m in metrics]
    if name not in accepted:
        raise ConfigError(
            f"optimized_metric={show(name)}: not a metric of the fixed eval; accepted: {', '.join(metrics)}, "
            f"or <task>/<metric> for a task of dataset.tasks ({', '.join(tasks)})"
            + ("; pass@<k> needs eval.pass_k.samples >= k" if name and str(name).startswith("pass@") else "")
        )


def check_config(cfg: Mapping[str, Any], world_size: int | None = None) -> None:
    """The whole check before anything is loaded or written: values first (import-light), then what the
    registries know: tasks and their config keys, rewards and their options, the prompt format, the
    sandbox settings and a local model path. (TRL's own rules: config.check_grpo_config, in the job.)"""
    check_values(cfg, world_size)
    from grpo_recipes.models.loading import check_model_path
    from grpo_recipes.train.data import few_shot, system_prompt
    from rewards import RewardContext, build_rewards
    from rewards.sandbox import Executor
    from tasks import validate_tasks

    dataset = cfg["dataset"]
    validate_tasks(dataset["tasks"])
    system_prompt(dataset)
    few_shot(dataset)
    if dataset["seed"] == cfg["eval"]["seed"]:
        raise ConfigError(
            f"eval.seed={cfg['eval']['seed']}: must differ from dataset.seed so that train and eval "
            "sets differ"
        )
    # the factories check their options; the scorer is never called here
    build_rewards(
        dataset["rewards"],
        RewardContext(
            scorer=lambda answer, entry: 0.0,
            prompt_format=dataset["prompt_format"],
            max_completion_length=cfg["grpo"].get("max_completion_length"),
        ),
    )
    check_curriculum(cfg)
    try:
        Executor(**(cfg.get("sandbox") or {}))
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    check_model_path(cfg["model"]["path"])


def check_batch(grpo: Mapping[str, Any], world_size: int) -> None:
    """TRL counts completions, not prompts: each generation batch must hold whole groups."""
    per_device = int(grpo.get("per_device_train_batch_size", 8))
    num_generations = int(grpo.get("num_generations") or 8)
    if grpo.get("generation_batch_size") is not None:
        batch, where = int(grpo["generation_batch_size"]), "grpo.generation_batch_size"
    else:
        steps = int(grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps", 1))
        batch = per_device * world_size * steps
        where = (
            f"grpo.per_device_train_batch_size ({per_device}) x processes ({world_size}) x "
            f"steps_per_generation ({steps})"
        )
    if batch % num_generations:
        raise ConfigError(
            f"{where} = {batch} completions per generation batch is not divisible by grpo.num_generations "
            f"({num_generations}); TRL counts completions, not prompts. Use a multiple of {num_generations}."
        )
    if grpo.get("dynamic_sampling"):
        check_dynamic_sampling(batch // world_size, num_generations, f"{where} / processes ({world_size})")


def check_dynamic_sampling(per_process_batch: int, num_generations: int, where: str) -> None:
    """Dynamic sampling filters groups on each process: each process's generation batch must hold whole
    groups."""
    if per_process_batch % num_generations:
        raise ConfigError(
            f"grpo.dynamic_sampling=true: {where} = {per_process_batch} completions per process is not a "
            f"multiple of grpo.num_generations ({num_generations}), so a prompt group would span processes. "
            f"Use a multiple of {num_generations}, or grpo.dynamic_sampling=false."
        )


def check_curriculum(cfg: Mapping[str, Any]) -> None:
    """dataset.curriculum on: thresholds in order, a task with a curriculum whose every level is a valid
    config, a reward whose verdicts drive the levels, and the level living in the main process."""
    settings = cfg["dataset"]["curriculum"]
    if not settings["enabled"]:
        if settings.get("eval_per_level"):
            raise ConfigError(
                f"dataset.curriculum.eval_per_level={show(settings['eval_per_level'])} needs "
                "dataset.curriculum.enabled=true (the levels are the curriculum's); set it 0 or enable it"
            )
        return
    from rewards.registry import VERDICT_REWARDS
    from tasks.difficulty import config_at, top_level

    if settings["lower_at"] > settings["raise_at"]:
        raise ConfigError(
            f"dataset.curriculum.lower_at={show(settings['lower_at'])} is above raise_at="
            f"{show(settings['raise_at'])}: a level falls below lower_at and rises at raise_at; "
            "need lower_at <= raise_at"
        )
    tasks = cfg["dataset"]["tasks"]
    tops = {name: top_level(name) for name in tasks}
    if all(top is None for top in tops.values()):
        raise ConfigError(
            f"dataset.curriculum.enabled=true, but no task of dataset.tasks ({', '.join(tasks)}) has a "
            "curriculum (most reasoning-gym tasks do, and sum_digits, reverse_digits); set it false or add "
            "such a task"
        )
    for name, top in tops.items():
        for level in range(top + 1 if top is not None else 0):
            try:
                config_at(name, level, (tasks[name] or {}).get("config") or {})
            except (AssertionError, ValueError, TypeError) as err:
                raise ConfigError(
                    f"dataset.tasks.{name}.config at curriculum level {level} is invalid: "
                    f"{err or type(err).__name__} (the level sets its curriculum's fields over this config)"
                ) from None
    rewards = cfg["dataset"]["rewards"]
    if not any(
        spec is not None and spec.get("fn", name) in VERDICT_REWARDS for name, spec in rewards.items()
    ):
        raise ConfigError(
            "dataset.curriculum.enabled=true needs a reward that judges every completion, whose verdicts "
            f"drive the levels: add one of {', '.join(VERDICT_REWARDS)} to dataset.rewards (weight 0 is fine)"
        )
    grpo = cfg.get("grpo") or {}
    if grpo.get("dataloader_num_workers", 0):
        raise ConfigError(
            f"grpo.dataloader_num_workers={show(grpo['dataloader_num_workers'])}: with dataset.curriculum "
            "on, problems are drawn at the current level in the main process; use 0"
        )
    if grpo.get("restore_callback_states_from_checkpoint"):
        raise ConfigError(
            "grpo.restore_callback_states_from_checkpoint=true: with dataset.curriculum on, the curriculum "
            "restores its levels itself on resume; leave it false"
        )


def unknown_key_message(key: str, known: list[str]) -> str:
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, known, n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    if key in MODEL_FIELDS or f"grpo.{key}" in SCHEMA:  # TRL's spelling, in a YAML file (cli.py takes it)
        hint = trl_hint(key)
    return f"{key}: unknown key.{hint} Accepted: {', '.join(known)}"


def _lookup(cfg: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node
