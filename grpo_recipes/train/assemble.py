"""The run's set-up, in one pass: each object built once, complete, in the order it is needed.

    config check (checks.py, before this) -> hardware -> model and tokenizer (LoRA, the response
    prefix its chat template pre-fills) -> sandbox, tasks and data -> rewards -> GRPOConfig

The trainer and its callbacks are built from this by run.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_common.errors import ConfigError
from grpo_recipes.config.resume import RunPlan
from grpo_recipes.models.hardware import Hardware

log = logging.getLogger("grpo_recipes")


@dataclass(frozen=True)
class Setup:
    """Everything a run needs, built before anything is written."""

    hw: Hardware
    model: Any
    tokenizer: Any
    peft_config: Any
    response_prefix: str
    taskset: Any
    train_dataset: Any
    eval_rows: list
    reward_funcs: list
    args: Any  # trl.GRPOConfig
    checkpoint: Path | None  # the checkpoint a resume continues from (None: from the start)
    resumed: bool
    curriculum: Any = None  # grpo_recipes.train.curriculum.Curriculum when dataset.curriculum is on


def assemble(cfg: dict[str, Any], plan: RunPlan) -> Setup:
    from grpo_common.templates import response_prefix
    from grpo_recipes.config.trainer_args import build_grpo_config, build_grpo_kwargs
    from grpo_recipes.models.engines import check_engine
    from grpo_recipes.models.hardware import detect_hardware, resolve_activation_checkpointing
    from grpo_recipes.models.loading import load_model_and_tokenizer
    from grpo_recipes.models.lora import lora_config
    from grpo_recipes.train.curriculum import build_curriculum_datasets
    from grpo_recipes.train.data import build_datasets
    from rewards import RewardContext, build_rewards
    from tasks.registry import is_code_task

    hw = detect_hardware()
    check_engine(hw.gpu)
    model, tokenizer = load_model_and_tokenizer(cfg["model"], on_gpu=hw.gpu, seed=cfg["seed"])
    peft_config = lora_config(cfg["model"]["lora"], model.config.model_type)
    prefix = response_prefix(cfg["model"]["response_prefix"], tokenizer)
    if prefix:
        log.info("the chat template pre-fills %r: rewards and eval read it + the completion", prefix)

    sandbox = configure_sandbox(cfg["sandbox"])
    curriculum = None
    if cfg["dataset"]["curriculum"]["enabled"]:
        taskset, train_dataset, eval_rows, curriculum = build_curriculum_datasets(cfg["dataset"], cfg["eval"])
    else:
        taskset, train_dataset, eval_rows = build_datasets(cfg["dataset"], cfg["eval"])
    if any(is_code_task(name) for name in taskset.names):
        log.info("code tasks run in the sandbox: %s", sandbox.layers())
    ctx = RewardContext(
        scorer=taskset.score,
        prompt_format=cfg["dataset"]["prompt_format"],
        max_completion_length=cfg["grpo"].get("max_completion_length"),
        judge=taskset.judge,
        response_prefix=prefix,
        on_verdicts=curriculum.recorder if curriculum is not None else None,
    )
    reward_funcs, weights = build_rewards(cfg["dataset"]["rewards"], ctx)

    grpo_kwargs = build_grpo_kwargs(cfg, hw, reward_weights=weights)
    if resolve_activation_checkpointing(grpo_kwargs, model, hw, lora=peft_config is not None):
        log.info(
            "activation checkpointing on (grpo.activation_checkpointing=%s)",
            cfg["grpo"]["activation_checkpointing"],
        )
    args = build_grpo_config(grpo_kwargs)
    return Setup(
        hw,
        model,
        tokenizer,
        peft_config,
        prefix,
        taskset,
        train_dataset,
        eval_rows,
        reward_funcs,
        args,
        checkpoint=last_checkpoint(plan),
        resumed=plan.action == "resume",
        curriculum=curriculum,
    )


def last_checkpoint(plan: RunPlan) -> Path | None:
    if plan.action != "resume":
        return None
    from transformers.trainer_utils import get_last_checkpoint

    found = get_last_checkpoint(str(plan.run_dir))
    return Path(found) if found else None


def configure_sandbox(settings: dict[str, Any] | None):
    from rewards import sandbox

    try:
        return sandbox.configure(**(settings or {}))
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
