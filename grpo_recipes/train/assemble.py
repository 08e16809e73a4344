"""The run's set-up in open-r1's order, each object built once, before anything is written: get_datasets
(first, so that an eval space too small is refused before the model loads), get_model, get_rewards,
get_tools, get_training_args. trainer.py then builds the trainer and its callbacks; run.py trains."""

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_recipes.config.resume import RunPlan
from grpo_recipes.models.hardware import Hardware

log = logging.getLogger("grpo_recipes")


@dataclass(frozen=True)
class Setup:
    hw: Hardware
    model: Any
    tokenizer: Any
    peft_config: Any
    response_prefix: str  # what the chat template pre-fills: rewards and the eval read it + the completion
    taskset: Any
    train_dataset: Any
    eval_rows: list
    reward_funcs: list
    args: Any  # trainer_args.RecipeGRPOConfig
    checkpoint: Path | None  # the checkpoint a resume continues from (None: from the start)
    resumed: bool
    curriculum: Any  # grpo_recipes.train.curriculum.Curriculum when dataset.curriculum is on
    reward_faults: Any  # rewards.guard.RewardFaults: the rewards' failed calls
    tools: tuple  # TRL's tools= and environment_factory=, and the fixed eval's
    environment_factory: Any


def assemble(cfg: dict[str, Any], plan: RunPlan) -> Setup:
    from grpo_recipes.models.hardware import check_engine, detect_hardware
    from rewards import sandbox
    from tasks.registry import is_code_task
    from tools import runs_code

    hw = detect_hardware()
    check_engine(hw.gpu)
    sandbox.configure(**cfg["sandbox"])  # checked (check_config); before any code runs
    taskset, train_dataset, eval_rows, curriculum = get_datasets(cfg)
    # Model-written code (code tasks, the python tool) runs in the sandbox: one that cannot run a program
    # here stops the run now, in one line, not after every reward or tool call has failed.
    code_tools = runs_code(cfg["tools"]["names"], cfg["env"]["name"])
    if code_tools or any(is_code_task(name) for name in taskset.names):
        log.info("model-written code runs in the sandbox: %s", sandbox.get_executor().layers())
    model, tokenizer, peft_config, prefix = get_model(cfg, hw)
    reward_funcs, weights, faults = get_rewards(cfg, taskset, prefix, curriculum)
    tools, environment_factory = get_tools(cfg, taskset)
    args = get_training_args(cfg, hw, weights, model, lora=peft_config is not None)
    if args.use_vllm and args.vllm_mode == "colocate" and args.vllm_max_model_length is None:
        from tools.environments import offered_tools

        args.vllm_max_model_length = vllm_context_length(
            tokenizer,
            [*train_dataset["prompt"], *(row["prompt"] for row in eval_rows)],
            offered_tools(tools, environment_factory),
            args.chat_template_kwargs,
            max(args.max_completion_length, cfg["eval"]["max_new_tokens"] or 0),
            model.config.max_position_embeddings,
        )
        log.info("vLLM's context: %d tokens", args.vllm_max_model_length)
    checkpoint = None
    if plan.action == "resume":  # from the newest whole checkpoint; None: from the start
        from grpo_recipes.outputs.checkpoints import usable_checkpoint

        checkpoint = usable_checkpoint(plan.run_dir, main=int(os.environ.get("RANK", "0")) == 0)
    return Setup(
        hw=hw,
        model=model,
        tokenizer=tokenizer,
        peft_config=peft_config,
        response_prefix=prefix,
        taskset=taskset,
        train_dataset=train_dataset,
        eval_rows=eval_rows,
        reward_funcs=reward_funcs,
        args=args,
        checkpoint=checkpoint,
        resumed=plan.action == "resume",
        curriculum=curriculum,
        reward_faults=faults,
        tools=tools,
        environment_factory=environment_factory,
    )


def get_datasets(cfg: dict[str, Any]):
    """(TaskSet, train Dataset, eval rows, Curriculum or None)."""
    if cfg["dataset"]["curriculum"]["enabled"]:
        from grpo_recipes.train.curriculum import build_curriculum_datasets

        return build_curriculum_datasets(cfg["dataset"], cfg["eval"])
    from grpo_recipes.train.data import build_datasets

    return (*build_datasets(cfg["dataset"], cfg["eval"]), None)


def get_model(cfg: dict[str, Any], hw: Hardware):
    """(model, tokenizer, LoRA config or None, the response prefix the chat template pre-fills)."""
    from grpo_common.templates import response_prefix
    from grpo_recipes.models.loading import load_model_and_tokenizer, lora_config

    # its chat template must then be able to call them; a refusal names the group that gives them
    tools = "tools" if cfg["tools"]["names"] else "env" if cfg["env"]["name"] else False
    model, tokenizer = load_model_and_tokenizer(
        cfg["model"], hw, seed=cfg["seed"], tools=tools, grpo=cfg["grpo"]
    )
    prefix = response_prefix(cfg["model"]["response_prefix"], tokenizer)
    if prefix:
        log.info("the chat template pre-fills %r: rewards and eval read it + the completion", prefix)
    return model, tokenizer, lora_config(cfg["model"]["lora"], model.config.model_type), prefix


def get_rewards(cfg: dict[str, Any], taskset, prefix: str, curriculum):
    """TRL reward functions (named by their dataset.rewards key), their weights, and their failures' record
    (a failing call scores None: rewards/guard.py)."""
    from rewards import RewardContext, build_rewards
    from rewards.guard import RewardFaults

    ctx = RewardContext(
        scorer=taskset.score,
        prompt_format=cfg["dataset"]["prompt_format"],
        max_completion_length=cfg["grpo"].get("max_completion_length"),
        judge=taskset.judge,
        response_prefix=prefix,
        on_verdicts=curriculum.recorder if curriculum is not None else None,
        faults=RewardFaults(Path(cfg["output_dir"]) / "reward_errors.jsonl", cfg["grpo"]["reward_timeout"]),
    )
    return (*build_rewards(cfg["dataset"]["rewards"], ctx), ctx.faults)


def get_tools(cfg: dict[str, Any], taskset) -> tuple[tuple, Any]:
    """The functions the model may call mid-answer (`tools.names`), and TRL's environment_factory for
    `env.name` (None: none), whose feedback environment scores answers with the tasks' own verifier."""
    names, env = cfg["tools"]["names"], cfg["env"]["name"]
    if not (names or env):
        return (), None
    from tools import build_tools
    from tools.environments import make_environment_factory

    said = [f"tools: {', '.join(names)}"] if names else []
    said += [f"environment: {env}"] if env else []
    cap = cfg["grpo"].get("max_tool_calling_iterations") or "unlimited (up to the length limit)"
    log.info("%s; tool-calling turns per rollout: %s", "; ".join(said), cap)
    factory = make_environment_factory(
        env,
        max_output_chars=cfg["tools"]["max_output_chars"],
        max_turns=cfg["env"]["max_turns"],
        scorer=taskset.score,
    )
    return tuple(build_tools(names, cfg["tools"]["max_output_chars"])), factory


# Room in vLLM's context for what a prompt gains after it is drawn: an environment's reset note appended to
# it (TRL's), a curriculum's later, longer problems.
CONTEXT_ROOM = 256


def vllm_context_length(tokenizer, prompts, tools, template_kwargs, budget: int, model_max: int) -> int:
    """The context vLLM needs: the longest prompt as TRL renders it (chat template and its kwargs, tool
    schemas) + CONTEXT_ROOM + the completion budget, at most the model's own. Left unset, vLLM takes the
    model's whole context (40,960 tokens for Qwen3, 131,072 for Llama 3.2), and does not start where one
    such sequence's KV cache does not fit its grpo.vllm_gpu_memory_utilization share."""
    render = functools.partial(
        tokenizer.apply_chat_template,
        tools=list(tools) or None,
        add_generation_prompt=True,
        return_dict=True,
        **(template_kwargs or {}),
    )
    longest = max(len(render(p)["input_ids"]) for p in prompts)
    return min(longest + CONTEXT_ROOM + budget, model_max)


def get_training_args(cfg: dict[str, Any], hw: Hardware, weights: list[float], model, lora: bool):
    """The run's GRPOConfig: the one the command-line check built, or built here; activation checkpointing
    resolved now that the model is loaded."""
    from grpo_recipes.config.trainer_args import build_grpo_config, build_grpo_kwargs, take_checked_args
    from grpo_recipes.models.hardware import resolve_activation_checkpointing

    args = take_checked_args(cfg) or build_grpo_config(build_grpo_kwargs(cfg, hw, reward_weights=weights))
    setting = {k: cfg["grpo"].get(k) for k in ("activation_checkpointing", "gradient_checkpointing")}
    asked = next((v for v in setting.values() if v is not None), None)  # before null is resolved below
    # set as TrainingArguments sets them: the older name mirrors the new one
    args.activation_checkpointing = args.gradient_checkpointing = resolve_activation_checkpointing(
        setting, model, hw, lora=lora
    )
    if args.activation_checkpointing:
        why = f"={asked}" if asked is not None else ": null, the training state is over a quarter of memory"
        log.info("activation checkpointing on (grpo.activation_checkpointing%s)", why)
    return args
