"""The trainer of a run: TRL's GRPOTrainer (or the dynamic-sampling one) with the recipe's callbacks, each
built complete from the assembled run (assemble.py) and TRL's args; and the fixed evaluator it runs."""

import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

from grpo_common.errors import ConfigError
from grpo_recipes.train.assemble import Setup

log = logging.getLogger("grpo_recipes")


def make_evaluator(cfg: dict[str, Any], s: Setup):
    from grpo_recipes.evaluation.evaluator import FixedEvaluator

    e = cfg["eval"]
    return FixedEvaluator(
        s.eval_rows,
        s.taskset,
        s.tokenizer,
        cfg["dataset"]["prompt_format"],
        e,
        max_new_tokens=e["max_new_tokens"] or s.args.max_completion_length,
        response_prefix=s.response_prefix,
        rewards=list(zip(s.reward_funcs, s.args.reward_weights or [1.0] * len(s.reward_funcs))),
        tools=s.tools,  # the same tools, environment, turn cap and chat template as training's rollouts
        environment_factory=s.environment_factory,
        max_tool_iterations=s.args.max_tool_calling_iterations,
        chat_template_kwargs=s.args.chat_template_kwargs,
    )


def eval_model(s: Setup, accelerator):
    """eval_only's model, prepared as training's and generating on the same fast path (unless it is off)."""
    from grpo_recipes.train.fast_generation import fast_generation

    model = accelerator.prepare_model(s.model, evaluation_mode=True).eval()
    if s.args.fast_paths is not False:
        fast_generation(model, accelerator)
    return model


def describe(cfg: dict[str, Any], run_dir: Path, s: Setup, accelerator) -> None:
    from grpo_recipes.models.hardware import emulated_bf16_warning, running_engine

    n_params = sum(t.numel() for t in s.model.parameters()) / 1e6
    per_level = sum(r.get("eval_level") is not None for r in s.eval_rows)
    log.info(
        "Run dir %s | %s x%d, %s | model %s (%.1f M parameters, %s) | tasks %s | %d train / %d eval "
        "problems%s",
        run_dir,
        "cuda" if s.hw.gpu else "cpu",
        s.hw.world_size,
        running_engine(accelerator),  # what the accelerator runs, not what was asked for
        cfg["model"]["path"],
        n_params,
        str(s.model.dtype).replace("torch.", ""),
        ", ".join(s.taskset.names),
        len(s.train_dataset),
        len(s.eval_rows) - per_level,
        f" (+{per_level} at the curriculum's levels)" if per_level else "",
    )
    if warning := emulated_bf16_warning(s.hw, bool(s.args.bf16), s.model):
        log.warning(warning)


class Training(NamedTuple):
    trainer: Any
    evaluation: Any  # FixedEvalCallback
    stop: Any  # GracefulStop
    speedups: str  # the fast paths installed, and why any is not
    optimizer: str | None  # how AdamW trains bf16 weights (models/bf16_adamw.py), or None: TRL's optimizer


def build_trainer(cfg: dict[str, Any], run_dir: Path, s: Setup) -> Training:
    """GRPOTrainer with the recipe's callbacks; TRL's own refusals as a ConfigError."""
    from transformers import TrainerControl
    from transformers.trainer_callback import ProgressCallback

    from grpo_recipes.config.trainer_args import name_the_key
    from grpo_recipes.evaluation.callback import FixedEvalCallback
    from grpo_recipes.evaluation.generation import VLLMGenerator, end_ids
    from grpo_recipes.models import bf16_adamw
    from grpo_recipes.outputs.logs import ConciseProgressCallback, MetricsFileCallback, NoSignalWarning
    from grpo_recipes.train import fast_paths
    from grpo_recipes.train.samples import SampleRecorder
    from grpo_recipes.train.sampling_kl import trainer_class
    from grpo_recipes.train.stopping import GracefulStop

    samples = SampleRecorder(  # samples.jsonl: answers read as the rewards read them (prefix + completion)
        run_dir / "samples.jsonl",
        every=cfg["log_samples_every"],
        count=cfg["log_samples_count"],
        judge=lambda texts, rows: s.taskset.judge([s.response_prefix + t for t in texts], rows),
        eos_token_ids=end_ids(s.model, s.tokenizer),  # as the fixed eval reads completions
        tools=bool(s.tools or s.environment_factory),  # then each rollout's turns are recorded too
    )
    try:
        trainer = trainer_class(s.args)(
            model=s.model,
            reward_funcs=samples.wrap(s.reward_funcs),
            args=s.args,
            train_dataset=s.train_dataset,
            processing_class=s.tokenizer,
            peft_config=s.peft_config,
            callbacks=[MetricsFileCallback(run_dir / "metrics.jsonl")],
            tools=list(s.tools) or None,
            environment_factory=s.environment_factory,
        )
    except ValueError as err:  # a setting TRL or transformers refuse only when the trainer is built
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        raise ConfigError(name_the_key(str(err), cfg["grpo"])) from None
    stop = GracefulStop(trainer.accelerator, s.reward_faults)  # a reward failing too often stops as SIGTERM
    evaluation = FixedEvalCallback(
        make_evaluator(cfg, s),
        run_dir,
        accelerator=trainer.accelerator,
        # eval metrics go to every tracker through the trainer's callbacks; a fresh TrainerControl, since
        # CallbackHandler.on_log resets `should_log`, which would drop this step's train log line
        send_logs=lambda logs, state: trainer.callback_handler.on_log(
            trainer.args, state, TrainerControl(), logs
        ),
        skip_final_eval=lambda: stop.requested,  # a stop on a signal: the resumed run evaluates instead
        # the fixed eval generates through the trainer's own vLLM engine (colocate or server) when it has one
        vllm_generator=(lambda model: VLLMGenerator(trainer.vllm_generation, s.tokenizer, model))
        if s.args.use_vllm
        else None,
    )
    if s.curriculum is not None:
        from grpo_recipes.train.curriculum import CurriculumCallback

        trainer.add_callback(CurriculumCallback(s.curriculum))
    trainer.add_callback(evaluation)
    if not s.args.disable_tqdm:  # the stock bar out (before ours, its subclass, is in), then ours
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(ConciseProgressCallback)
    trainer.add_callback(NoSignalWarning())
    trainer.add_callback(samples)
    trainer.add_callback(stop)
    if trainer.is_fsdp_enabled:  # FSDP's sharded checkpoints get what eval_only needs to load them
        from grpo_recipes.models.weights import CompleteShardedCheckpoints

        trainer.add_callback(CompleteShardedCheckpoints())
    return Training(trainer, evaluation, stop, fast_paths.apply(trainer), bf16_adamw.install(trainer))
