"""One training run: validate everything, then build data, rewards, model and GRPOTrainer, train,
and write the outputs. Everything a user can get wrong is checked before anything is written.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_recipes.errors import ConfigError

log = logging.getLogger("grpo_recipes")


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def last_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return checkpoints[-1] if checkpoints else None


def check_run_dir(run_dir: Path, resume: bool) -> Path | None:
    """Never overwrite an earlier run: continue it (resume=true) or pick another run_name."""
    checkpoint = last_checkpoint(run_dir) if run_dir.exists() else None
    if resume:
        return checkpoint
    if checkpoint is not None or (run_dir / "train_results.json").exists():
        raise ConfigError(
            f"output dir '{run_dir}' already holds a run: pass resume=true to continue it, "
            "or a new run_name=... to start another"
        )
    return None


def prepare(cfg: dict[str, Any]):
    """Validation and everything cheap: returns what training needs, writes nothing."""
    from grpo_recipes.config import build_grpo_kwargs, detect_hardware
    from grpo_recipes.data import build_datasets
    from grpo_recipes.models import check_model_path
    from rewards import RewardContext, build_rewards

    hw = detect_hardware()
    check_model_path(cfg["model"]["path"])
    taskset, train_dataset, eval_rows = build_datasets(cfg["dataset"], cfg["eval"])
    ctx = RewardContext(scorer=taskset.score, prompt_format=cfg["dataset"]["prompt_format"])
    reward_funcs, weights = build_rewards(cfg["dataset"]["rewards"], ctx)
    grpo_kwargs = build_grpo_kwargs(cfg, hw, reward_weights=weights)
    checkpoint = check_run_dir(Path(cfg["output_dir"]), bool(cfg.get("resume")))
    return hw, taskset, train_dataset, eval_rows, reward_funcs, grpo_kwargs, checkpoint


@contextlib.contextmanager
def console(run_dir: Path | None):
    from grpo_recipes.outputs import setup_console

    saved = sys.stdout, sys.stderr
    setup_console(run_dir)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def train(cfg: DictConfig) -> float:
    """Run one job of train_grpo.py; returns the final fixed-eval accuracy (for sweepers)."""
    # TRL 1.16 still calls transformers' deprecated alias on every step; the warning is not the user's to fix.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    container = OmegaConf.to_container(cfg, resolve=True)
    prepared = prepare(container)
    run_dir = Path(container["output_dir"])
    main = is_main_process()
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    with console(run_dir if main else None):
        if main:
            OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
        return _train(container, run_dir, *prepared)


def _train(cfg, run_dir, hw, taskset, train_dataset, eval_rows, reward_funcs, grpo_kwargs, checkpoint) -> float:
    from transformers.trainer_callback import ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_recipes.evaluation import FixedEvalCallback, FixedEvaluator
    from grpo_recipes.models import load_model_and_tokenizer
    from grpo_recipes.outputs import ConciseProgressCallback, MetricsFileCallback

    log.info("Run dir %s | %s x%d | tasks %s | %d train / %d eval problems", run_dir, hw.name, hw.world_size,
             ", ".join(taskset.names), len(train_dataset), len(eval_rows))
    model, tokenizer = load_model_and_tokenizer(cfg["model"], on_gpu=hw.gpu, seed=cfg["seed"])
    args = GRPOConfig(**grpo_kwargs)
    eval_cfg = cfg["eval"]
    evaluator = FixedEvaluator(
        eval_rows, taskset, tokenizer, cfg["dataset"]["prompt_format"],
        max_new_tokens=eval_cfg.get("max_new_tokens") or args.max_completion_length,
        batch_size=eval_cfg["batch_size"], do_sample=eval_cfg["do_sample"], temperature=eval_cfg["temperature"],
    )
    eval_callback = FixedEvalCallback(evaluator, run_dir, every_n_steps=eval_cfg["every_n_steps"])
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
        processing_class=tokenizer, callbacks=[MetricsFileCallback(run_dir / "metrics.jsonl"), eval_callback],
    )
    eval_callback.attach(trainer)
    if not args.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(ConciseProgressCallback)
    if checkpoint is not None:
        log.info("Resuming from %s", checkpoint)
    result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)

    trainer.save_model(str(run_dir / "final"))
    history = eval_callback.history
    first, last = min(history), max(history)
    metrics = dict(result.metrics)
    metrics.update({"baseline_eval_accuracy": history[first]["accuracy"],
                    "final_eval_accuracy": history[last]["accuracy"], "final_eval_step": last})
    if trainer.is_world_process_zero():
        trainer.save_metrics("train", metrics, combined=False)
        log.info("Fixed eval accuracy: step %d %.3f -> step %d %.3f | outputs in %s",
                 first, history[first]["accuracy"], last, history[last]["accuracy"], run_dir)
    return float(history[last]["accuracy"])


def run_from_hydra(cfg: DictConfig) -> float:
    try:
        return train(cfg)
    except ConfigError as err:
        _remove_if_empty(cfg)
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def _remove_if_empty(cfg: DictConfig) -> None:
    """Hydra creates the run dir before the job starts; leave no empty dir behind a config error."""
    with contextlib.suppress(Exception):
        Path(cfg.output_dir).rmdir()  # only succeeds when empty
