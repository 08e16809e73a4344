"""The config check: every knob's value against its declaration (knobs.py), then the rules that span knobs,
checked before anything is loaded or written. `check_values` is import-light (no torch, TRL or reasoning-gym),
so a mistake costs a second. GRPOConfig fields the recipe does not declare are type-checked against TRL's own
dataclass, and TRL's own rules applied, when the config is built (trainer_args.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from grpo_common.errors import ConfigError, did_you_mean
from grpo_recipes.config.cli import trl_hint
from grpo_recipes.config.knobs import CLOSED_SECTIONS, SCHEMA
from grpo_recipes.config.values import Float, lookup, show
from tools import ENV_TOOLS


def check_values(cfg: Mapping[str, Any], world_size: int | None = None) -> None:
    """Raise ConfigError on the first key whose value is not accepted (cfg: the resolved config)."""
    for key, spec in SCHEMA.items():
        found, value = lookup(cfg, key)
        if not found and not key.startswith("grpo."):
            raise ConfigError(f"{key}: missing; expected {spec.describe()}")
        if found and not spec.accepts(value):
            raise ConfigError(f"{key}={show(value)}: expected {spec.describe()}")
    for group in CLOSED_SECTIONS:
        found, section = lookup(cfg, group) if group else (True, cfg)
        if found and isinstance(section, Mapping):
            known = known_keys(group)
            for key in section:
                if key not in known:
                    raise ConfigError(unknown_key_message(f"{group}.{key}" if group else key, known))
    if cfg["grpo"].get("eval_strategy", "no") != "no":
        raise ConfigError(
            f"grpo.eval_strategy={show(cfg['grpo']['eval_strategy'])}: the recipe runs its own fixed "
            "eval (eval.every_n_steps); TRL's eval loop stays off (no)"
        )
    for name, spec in cfg["dataset"]["rewards"].items():
        if spec is not None and not (isinstance(spec, Mapping) and Float().accepts(spec.get("weight", 1.0))):
            raise ConfigError(
                f"dataset.rewards.{name}: expected {{weight: <number>, ...options}} or null, got {show(spec)}"
            )
    check_batch(cfg["grpo"], world_size or int(os.environ.get("WORLD_SIZE", "1")))
    check_optimized_metric(cfg)


# The fixed eval's metrics a sweeper may optimize (overall, or `<task>/<metric>`), and pass@<k>.
OBJECTIVES = ("accuracy", "mean_score", "format", "mean_length", "truncated")


def check_optimized_metric(cfg: Mapping[str, Any]) -> None:
    """optimized_metric names a metric the final fixed eval reports (the values are checked already)."""
    name, tasks = cfg["optimized_metric"], list(cfg["dataset"]["tasks"])
    pass_k = cfg["eval"]["pass_k"]
    metrics = [*OBJECTIVES, *(f"pass@{k}" for k in pass_k["k"] if k <= pass_k["samples"])]
    accepted = metrics + [f"{t}/{m}" for t in tasks for m in metrics]
    if name not in accepted:
        raise ConfigError(
            f"optimized_metric={show(name)}: not a metric of the fixed eval; accepted: {', '.join(metrics)}, "
            f"or <task>/<metric> for a task of dataset.tasks ({', '.join(tasks)})"
            + ("; pass@<k> needs eval.pass_k.samples >= k" if name.startswith("pass@") else "")
        )


def check_config(cfg: Mapping[str, Any]) -> list[float]:
    """The whole check before anything is loaded or written: values first (import-light), then what the
    registries know: tasks (the transfer sets' too) and their config keys, rewards and their options, the
    prompt format, the sandbox settings and a local model path; returns the rewards' weights. (TRL's own
    rules: trainer_args.check_trainer_config.)"""
    check_values(cfg)
    from grpo_common.templates import TRL_PREFIX, load_chat_template
    from grpo_recipes.models.loading import check_model_path
    from grpo_recipes.train.data import few_shot, system_prompt, transfer_sets
    from rewards import RewardContext, build_rewards
    from rewards.sandbox import check_settings
    from tasks import validate_tasks

    dataset = cfg["dataset"]
    validate_tasks(dataset["tasks"])
    transfer_sets(dataset, cfg["eval"])  # their tasks and config keys too
    system_prompt(dataset)
    few_shot(dataset)
    if dataset["seed"] == cfg["eval"]["seed"]:
        raise ConfigError(
            f"eval.seed={cfg['eval']['seed']}: must differ from dataset.seed so that train and eval "
            "sets differ"
        )
    max_length = cfg["grpo"].get("max_completion_length")
    ctx = RewardContext(lambda answer, entry: 0.0, dataset["prompt_format"], max_length)  # never scores here
    _, weights = build_rewards(dataset["rewards"], ctx)  # the factories check their options
    check_curriculum(cfg)
    check_tools(cfg)
    try:
        check_settings(**cfg["sandbox"])
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    check_model_path(cfg["model"]["path"], ask_hub=True)
    for key in ("chat_template", "tool_chat_template"):  # trl:<name>: a template the installed TRL ships
        if str(cfg["model"].get(key) or "").startswith(TRL_PREFIX):
            load_chat_template(cfg["model"][key], f"model.{key}")
    return weights


def check_batch(grpo: Mapping[str, Any], world_size: int) -> None:
    """TRL counts completions, not prompts: each generation batch must hold whole groups."""
    per_device, num_generations = int(grpo["per_device_train_batch_size"]), int(grpo["num_generations"])
    if grpo.get("generation_batch_size") is not None:
        batch, where = int(grpo["generation_batch_size"]), "grpo.generation_batch_size"
    else:
        steps = int(grpo.get("steps_per_generation") or grpo["gradient_accumulation_steps"])
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
    per_process = batch // world_size  # dynamic sampling filters whole groups on each process
    if grpo.get("dynamic_sampling") and per_process % num_generations:
        raise ConfigError(
            f"grpo.dynamic_sampling=true: {where} / processes ({world_size}) = {per_process} completions per "
            f"process is not a multiple of grpo.num_generations ({num_generations}), so a prompt group would "
            f"span processes. Use a multiple of {num_generations}, or grpo.dynamic_sampling=false."
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
    used = {spec.get("fn", name) for name, spec in cfg["dataset"]["rewards"].items() if spec is not None}
    if not used & set(VERDICT_REWARDS):
        raise ConfigError(
            "dataset.curriculum.enabled=true needs a reward that judges every completion, whose verdicts "
            f"drive the levels: add one of {', '.join(VERDICT_REWARDS)} to dataset.rewards (weight 0 is fine)"
        )
    grpo = cfg["grpo"]
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


TOOL_REWARDS = ("tool_format", "tool_errors")  # rewards/tool_use.py: they read tool turns


def check_tools(cfg: Mapping[str, Any]) -> None:
    """The rules that span the tools=, env= and dataset groups: every tool name the model is shown is unique,
    the iteration cap lets the feedback environment's turns happen, the tool reward terms and the worked
    examples' tool calls have tools to count or call. (The chat template's ability to call tools is checked
    when the tokenizer loads: grpo_recipes/models/loading.py.)"""
    from grpo_recipes.train.data import few_shot

    env = cfg["env"]["name"]  # the tools the model is shown: tools.names, then the environment's methods
    names = [*dict.fromkeys(cfg["tools"]["names"]), *(ENV_TOOLS[env] if env else ())]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(
            f"env.name={env}: tools.names gives the model a tool named '{clash[0]}' too, and it cannot tell "
            "them apart: keep one (tools=none, or env=none)"
        )
    cap, turns = cfg["grpo"].get("max_tool_calling_iterations"), cfg["env"]["max_turns"]
    if env == "feedback" and cap is not None and cap < turns:
        raise ConfigError(
            f"grpo.max_tool_calling_iterations={cap}: env=feedback needs at least env.max_turns={turns} "
            "tool-calling turns (one per answer submitted); raise it, or lower env.max_turns"
        )
    for key, spec in cfg["dataset"]["rewards"].items():
        fn = spec.get("fn", key) if isinstance(spec, Mapping) else key
        if spec is not None and fn in TOOL_REWARDS and not names:
            raise ConfigError(
                f"dataset.rewards.{key}: {fn} scores tool calls, and this run gives the model no tool: "
                "add tools= or env=, or drop it"
            )
    for name in (name for shot in few_shot(cfg["dataset"]) for name, _, _ in shot.tool_calls):
        if name not in names:
            shown = ", ".join(names) if names else "none (add tools= or env=)"
            raise ConfigError(
                f"dataset.few_shot: a worked example calls the tool '{name}', which this run does not give "
                f"the model; its tools: {shown}"
            )


def known_keys(section: str) -> list[str]:
    """The keys declared directly under a closed section ("" is the top level), nested groups included."""
    prefix = f"{section}." if section else ""
    return sorted({k[len(prefix) :].split(".")[0] for k in SCHEMA if k.startswith(prefix)})


def unknown_key_message(key: str, known: list[str]) -> str:
    # TRL's spelling, in a YAML file (cli.py takes it on the command line), else a close key
    hint = trl_hint(key) or did_you_mean(key.rsplit(".", 1)[-1], known)
    if key == "accelerate":  # config/accelerate/ holds accelerate's own files, not a Hydra group
        hint = (
            " config/accelerate/ holds accelerate's own config files: "
            "accelerate launch --config_file config/accelerate/<name>.yaml train_grpo.py ..."
        )
    return f"{key}: unknown key.{hint} Accepted: {', '.join(known)}"
