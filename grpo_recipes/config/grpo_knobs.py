"""The `grpo` group's declarations: GRPOConfig fields with the recipe's defaults (a small model on a CPU) or
ranges TRL leaves unchecked, and the recipe's own fields (`RecipeGRPOFields`), which trainer_args.py adds
to TRL's GRPOConfig as open-r1 extends it. Every other group: knobs.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_recipes.config.values import (
    BOOL,
    COUNT,
    OPT_BOOL,
    PROB,
    STEPS,
    STR,
    TRL_DEFAULT,
    Choice,
    Float,
    Int,
    knob,
)


@dataclass
class RecipeGRPOFields:
    fast_paths: Any = knob("auto", Choice("auto", True, False), "the CPU speed-ups (README)", resume=True)
    compile_layers: Any = knob(
        "auto",
        Choice("auto", True, False),
        "compile the training passes (auto: CPU, 100+ steps, 100M+ model)",
        resume=True,
    )
    no_signal_warning: int = knob(
        3, STEPS, "warn after N steps with no reward variance (0: off)", resume=True
    )
    dynamic_sampling: bool = knob(False, BOOL, "DAPO's dynamic sampling: train only on groups that differ")
    dynamic_sampling_max_draws: int = knob(4, COUNT, "at most this many generation batches per step")
    reward_timeout: float = knob(600.0, Float(0), "seconds a reward call may take (0: no limit)", resume=True)
    reward_errors_stop_at: float = knob(
        0.5, PROB, "stop when this share of a reward's calls fail", resume=True
    )
    reward_errors_window: int = knob(10, COUNT, "steps over which that share is counted", resume=True)


@dataclass
class GRPO(RecipeGRPOFields):
    num_generations: int = knob(8, Int(2), "completions per prompt (the group)")
    per_device_train_batch_size: int = knob(16, COUNT, "completions, not prompts: 16 = 2 prompts x 8")
    gradient_accumulation_steps: int = knob(1, COUNT, "micro-batches per update")
    max_completion_length: int = knob(32, COUNT, "tokens per completion")
    temperature: float = knob(1.0, Float(above=0), "sampling temperature")
    beta: float = knob(0.0, Float(0), "KL coefficient (0: no reference model)")
    loss_type: str = knob("dapo", STR, "grpo | dr_grpo | dapo | bnpo | cispo | sapo | ... (TRL's)")
    scale_rewards: Any = knob("group", Choice("group", "batch", "none", True, False), "advantage scaling")
    lr_scheduler_type: str = knob("constant_with_warmup", STR, "transformers' scheduler")
    warmup_steps: float = knob(2, Float(0), "warm-up steps")
    activation_checkpointing: Any = knob(None, OPT_BOOL, "null: on only where memory needs it", resume=True)
    bf16: Any = knob(None, OPT_BOOL, "null: bf16 where the hardware computes it")
    cache_implementation: Any = knob(
        None,
        Choice("static", "dynamic", "offloaded", "quantized", optional=True),
        "generation's KV cache (null: on one GPU static, its decoding step compiled; elsewhere the default)",
        resume=True,
    )
    logging_steps: float = knob(1, Float(above=0), "log every N steps", resume=True)
    save_strategy: str = knob("steps", STR, "when to save checkpoints", resume=True)
    save_steps: float = knob(20, Float(above=0), "a checkpoint every N steps", resume=True)
    save_total_limit: Any = knob(2, Int(1, optional=True), "checkpoints kept", resume=True)
    # TRL's defaults, range-checked here
    steps_per_generation: Any = knob(TRL_DEFAULT, Int(1, optional=True), "micro-batches per generation")
    generation_batch_size: Any = knob(TRL_DEFAULT, Int(1, optional=True), "completions per generation")
    num_iterations: int = knob(TRL_DEFAULT, COUNT, "updates per generation batch")
    top_p: float = knob(TRL_DEFAULT, Float(above=0, high=1), "nucleus sampling")
    top_k: int = knob(TRL_DEFAULT, STEPS, "top-k sampling (0: off)")
    min_p: Any = knob(TRL_DEFAULT, Float(0, high=1, optional=True), "min-p sampling")
    repetition_penalty: float = knob(TRL_DEFAULT, Float(above=0), "repetition penalty")
    epsilon: float = knob(TRL_DEFAULT, Float(0), "clip range")
    epsilon_high: Any = knob(TRL_DEFAULT, Float(0, optional=True), "upper clip range (DAPO)")
    delta: Any = knob(TRL_DEFAULT, Float(above=0, optional=True), "two-sided clip")
    max_grad_norm: float = knob(TRL_DEFAULT, Float(0), "gradient clipping")
    weight_decay: float = knob(TRL_DEFAULT, Float(0), "AdamW's weight decay")
    gradient_checkpointing: Any = knob(TRL_DEFAULT, OPT_BOOL, "activation_checkpointing's alias", resume=True)
    fp16: bool = knob(TRL_DEFAULT, BOOL, "fp16 mixed precision")
    importance_sampling_level: str = knob(TRL_DEFAULT, Choice("token", "sequence"), "token | sequence (GSPO)")
    vllm_mode: str = knob(TRL_DEFAULT, Choice("server", "colocate"), "where vLLM runs")
    mask_truncated_completions: bool = knob(TRL_DEFAULT, BOOL, "leave cut-off completions out of the loss")
    vllm_gpu_memory_utilization: float = knob(TRL_DEFAULT, Float(above=0, high=1), "vLLM's GPU share")
    max_tool_calling_iterations: Any = knob(TRL_DEFAULT, Int(1, optional=True), "tool turns per rollout")
