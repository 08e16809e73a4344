"""One training run: validate everything, then build data, rewards, model and GRPOTrainer, train,
and write the outputs. Everything a user can get wrong is checked before anything is written.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_common.errors import ConfigError
from grpo_recipes import resume
from grpo_recipes.checks import check_config
from grpo_recipes.config import check_trainer_config
from grpo_recipes.resume import RunPlan

log = logging.getLogger("grpo_recipes")


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


@dataclass
class Prepared:
    """Everything a run needs, built and checked before anything is written."""

    hw: Any
    taskset: Any
    train_dataset: Any
    eval_rows: list
    reward_funcs: list
    grpo_kwargs: dict
    checkpoint: Path | None
    model: Any
    tokenizer: Any
    peft_config: Any = None
    response_prefix: str = ""
    resumed: bool = False


def prepare(cfg: dict[str, Any], plan: RunPlan) -> Prepared:
    from grpo_common.templates import response_prefix
    from grpo_recipes.config import (
        build_grpo_kwargs,
        detect_hardware,
        resolve_activation_checkpointing,
    )
    from grpo_recipes.data import build_datasets
    from grpo_recipes.lora import lora_config
    from grpo_recipes.models import check_model_path, load_model_and_tokenizer
    from rewards import RewardContext, build_rewards
    from tasks.code import is_code_task

    hw = detect_hardware()
    check_model_path(cfg["model"]["path"])
    sandbox = configure_sandbox(cfg.get("sandbox"))
    taskset, train_dataset, eval_rows = build_datasets(cfg["dataset"], cfg["eval"])
    if any(is_code_task(name) for name in taskset.names):
        log.info("code tasks run in the sandbox: %s", sandbox.layers())
    ctx = RewardContext(scorer=taskset.score, prompt_format=cfg["dataset"]["prompt_format"],
                        max_completion_length=cfg["grpo"].get("max_completion_length"), judge=taskset.judge)
    reward_funcs, weights = build_rewards(cfg["dataset"]["rewards"], ctx)
    grpo_kwargs = build_grpo_kwargs(cfg, hw, reward_weights=weights)
    checkpoint = None
    if plan.action == "resume":
        from transformers.trainer_utils import get_last_checkpoint

        found = get_last_checkpoint(str(plan.run_dir))
        checkpoint = Path(found) if found else None
    model, tokenizer = load_model_and_tokenizer(cfg["model"], on_gpu=hw.gpu, seed=cfg["seed"])
    peft_config = lora_config(cfg["model"].get("lora"), model.config.model_type)
    if resolve_activation_checkpointing(grpo_kwargs, model, hw, lora=peft_config is not None):
        log.info("activation checkpointing on (grpo.activation_checkpointing=%s)",
                 cfg["grpo"].get("activation_checkpointing"))
    ctx.response_prefix = response_prefix(cfg["model"].get("response_prefix", "auto"), tokenizer)
    if ctx.response_prefix:
        log.info("the chat template pre-fills %r: rewards and eval read it + the completion", ctx.response_prefix)
    return Prepared(hw, taskset, train_dataset, eval_rows, reward_funcs, grpo_kwargs, checkpoint, model, tokenizer,
                    peft_config, ctx.response_prefix, resumed=plan.action == "resume")


def configure_sandbox(settings: dict[str, Any] | None):
    from rewards import sandbox

    try:
        return sandbox.configure(**(settings or {}))
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None


@contextlib.contextmanager
def console(run_dir: Path | None):
    from grpo_recipes.outputs import setup_console

    saved = sys.stdout, sys.stderr
    setup_console(run_dir, main=is_main_process())
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def train(cfg: DictConfig) -> float:
    """Run one job of train_grpo.py; returns the final fixed-eval accuracy (for sweepers)."""
    # TRL 1.16 still calls transformers' deprecated alias on every step; the warning is not the user's to fix.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    container = OmegaConf.to_container(cfg, resolve=True)
    run_dir = Path(container["output_dir"])
    main = is_main_process()
    with console(None):
        check_config(container)  # again: a search's sampled values are known only here
        check_trainer_config(container)
        plan = resume.plan_run(run_dir, container["resume"], container["eval_only"])
        saved = _saved_config(run_dir) if plan.action != "new" else None
        changed = resume.check_changes(run_dir, saved, container) if saved is not None else []
        if plan.action == "finished":
            resume.check_finished(run_dir, changed)
            log.info(resume.finished_message(run_dir))
            return float(json.loads((run_dir / "train_results.json").read_text()).get("final_eval_accuracy", 0.0))
        prepared = prepare(container, plan)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    with console(run_dir if main else None):
        if main:
            if saved is None:  # written once, when the run starts: the record of what the run is
                OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
            _record_overrides(run_dir, resumed=plan.action == "resume")
        try:
            if container.get("eval_only"):
                return _eval_only(container, run_dir, prepared)
            return _train(container, run_dir, prepared)
        finally:
            _finish_trackers()


def _saved_config(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "config.yaml"
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False) if path.is_file() else None


def _finish_trackers() -> None:
    """Close this job's wandb run: the next job of a multirun must start its own, not log into this one."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
        wandb.teardown()  # settings (WANDB_DIR) are cached per process; the next job reads them anew


def _record_overrides(run_dir: Path, resumed: bool) -> None:
    """This job's command-line overrides, as a new entry of overrides.yaml (sweep summaries, resumes)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        resume.record_overrides(run_dir, list(HydraConfig.get().overrides.task), resumed)


def make_evaluator(cfg: dict[str, Any], p: Prepared, max_completion_length: int):
    from grpo_recipes.evaluation import FixedEvaluator

    e = cfg["eval"]
    return FixedEvaluator(
        p.eval_rows, p.taskset, p.tokenizer, cfg["dataset"]["prompt_format"],
        max_new_tokens=e.get("max_new_tokens") or max_completion_length, batch_size=e["batch_size"],
        do_sample=e["do_sample"], temperature=e["temperature"], pass_k=e.get("pass_k"),
        print_examples=e.get("print_examples", 0), response_prefix=p.response_prefix,
    )


def _describe(cfg: dict[str, Any], run_dir: Path, p: Prepared) -> None:
    n_params = sum(t.numel() for t in p.model.parameters()) / 1e6
    log.info("Run dir %s | %s x%d | model %s (%.1f M parameters, %s) | tasks %s | %d train / %d eval problems",
             run_dir, p.hw.name, p.hw.world_size, cfg["model"]["path"], n_params,
             str(p.model.dtype).replace("torch.", ""), ", ".join(p.taskset.names), len(p.train_dataset),
             len(p.eval_rows))


def model_step(model_path: str) -> int:
    """The training step a saved model was taken at (its trainer_state.json); 0 for a base model."""
    state = Path(model_path).expanduser() / "trainer_state.json"
    return int(json.loads(state.read_text())["global_step"]) if state.is_file() else 0


def _eval_only(cfg: dict[str, Any], run_dir: Path, p: Prepared) -> float:
    """The fixed evaluation alone, on a checkpoint or a base model: same problems, same JSON."""
    from accelerate import Accelerator

    from grpo_recipes.fast_paths import generate_with_cached_casts
    from grpo_recipes.outputs import append_metrics
    from grpo_recipes.report import write_report

    _describe(cfg, run_dir, p)
    # The precision training would use (the Trainer wraps forward in bf16 autocast when bf16 is on),
    # so that eval_only on a checkpoint reproduces that run's eval exactly.
    mixed = "bf16" if p.grpo_kwargs.get("bf16") else ("fp16" if p.grpo_kwargs.get("fp16") else "no")
    accelerator = Accelerator(cpu=not p.hw.gpu, mixed_precision=mixed)
    model = accelerator.prepare_model(p.model, evaluation_mode=True).eval()
    generate_with_cached_casts(model, accelerator)
    step = model_step(cfg["model"]["path"])
    evaluator = make_evaluator(cfg, p, p.grpo_kwargs.get("max_completion_length") or 256)
    metrics, _ = evaluator.run(model, accelerator, step, run_dir / "eval_results")
    if accelerator.is_main_process:
        append_metrics(run_dir / "metrics.jsonl", step, {f"eval_{k}": v for k, v in metrics.items()})
        write_report(run_dir)
    return float(metrics["accuracy"])


def _train(cfg: dict[str, Any], run_dir: Path, p: Prepared) -> float:
    from transformers.trainer_callback import ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_recipes import fast_paths
    from grpo_recipes.evaluation import FixedEvalCallback
    from grpo_recipes.outputs import ConciseProgressCallback, MetricsFileCallback
    from grpo_recipes.report import write_report
    from grpo_recipes.stopping import GracefulStop, trim_metrics_after

    _describe(cfg, run_dir, p)
    if p.peft_config is not None:
        log.info("LoRA r=%d alpha=%d on %s", p.peft_config.r, p.peft_config.lora_alpha,
                 sorted(p.peft_config.target_modules) if not isinstance(p.peft_config.target_modules, str)
                 else p.peft_config.target_modules)
    # Unresolved, TRL would read None as its own default (on): prepare() decides it from memory.
    assert p.grpo_kwargs.get("activation_checkpointing") is not None, "resolve_activation_checkpointing first"
    args = GRPOConfig(**p.grpo_kwargs)
    evaluator = make_evaluator(cfg, p, args.max_completion_length)
    eval_callback = FixedEvalCallback(evaluator, run_dir, every_n_steps=cfg["eval"]["every_n_steps"])
    trainer = GRPOTrainer(
        model=p.model, reward_funcs=p.reward_funcs, args=args, train_dataset=p.train_dataset,
        processing_class=p.tokenizer, peft_config=p.peft_config,
        callbacks=[MetricsFileCallback(run_dir / "metrics.jsonl"), eval_callback],
    )
    eval_callback.attach(trainer)
    log.info("Fast paths: %s", ", ".join(fast_paths.apply(trainer)) or "none for this device")
    if not args.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(ConciseProgressCallback)
    n_train = sum(t.numel() for t in trainer.model.parameters() if t.requires_grad)
    n_all = sum(t.numel() for t in trainer.model.parameters())
    log.info("Training %.2f M of %.2f M parameters (%.2f%%)", n_train / 1e6, n_all / 1e6, 100 * n_train / n_all)
    if p.resumed:  # from the last checkpoint, or from the start when the run stopped before its first
        step = int(p.checkpoint.name.split("-")[-1]) if p.checkpoint is not None else -1
        dropped = trim_metrics_after(run_dir / "metrics.jsonl", step) if trainer.is_world_process_zero() else 0
        log.info("Resuming from %s (%d metric lines after step %d dropped: they are logged again)",
                 p.checkpoint or "the start: no checkpoint was saved", dropped, max(step, 0))
    stop = GracefulStop().install()
    trainer.add_callback(stop)
    eval_callback.skip_final_eval = lambda: stop.requested
    try:
        result = trainer.train(resume_from_checkpoint=str(p.checkpoint) if p.checkpoint else None)
    finally:
        stop.uninstall()
    if stop.requested:
        if trainer.is_world_process_zero():
            write_report(run_dir)
        log.warning("Stopped at step %d with checkpoint-%d saved. Continue with: %s", trainer.state.global_step,
                    trainer.state.global_step, resume_command(cfg))
        raise Interrupted(stop.exit_code)

    final = run_dir / "final"
    trainer.save_model(str(final))  # the adapter alone when LoRA is on
    if p.peft_config is not None and cfg["model"]["lora"].get("merge_on_save") and trainer.is_world_process_zero():
        merged = trainer.model.merge_and_unload()
        merged.save_pretrained(run_dir / "final-merged")
        p.tokenizer.save_pretrained(run_dir / "final-merged")
    history = eval_callback.history
    first, last = min(history), max(history)
    metrics = dict(result.metrics)
    metrics.update({"baseline_eval_accuracy": history[first]["accuracy"],
                    "final_eval_accuracy": history[last]["accuracy"], "final_eval_step": last})
    if trainer.is_world_process_zero():
        trainer.state.save_to_json(str(final / "trainer_state.json"))  # lets eval_only know the step
        trainer.save_metrics("train", metrics, combined=False)
        report = write_report(run_dir)
        log.info("Fixed eval accuracy: step %d %.3f -> step %d %.3f | report: %s",
                 first, history[first]["accuracy"], last, history[last]["accuracy"], report)
    return float(history[last]["accuracy"])


def resume_command(cfg: dict[str, Any]) -> str:
    """The command that continues this run as it was: the run's own overrides are read from its directory."""
    import shlex

    args = [f"run_name={cfg['run_name']}"]
    if cfg["output_root"] != "outputs":
        args.append(f"output_root={cfg['output_root']}")
    return "python train_grpo.py " + " ".join(shlex.quote(a) for a in args + ["resume=true"])


class Interrupted(Exception):
    """Training stopped on a signal after saving a checkpoint; carries the exit code."""

    def __init__(self, exit_code: int):
        super().__init__(exit_code)
        self.exit_code = exit_code


def run_from_hydra(cfg: DictConfig) -> float:
    try:
        return train(cfg)
    except ConfigError as err:
        _remove_if_empty(cfg)
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as stop:
        sys.exit(stop.exit_code)
    except KeyboardInterrupt:
        print("interrupted: files written so far are kept; resume=true continues from the last checkpoint",
              file=sys.stderr)
        sys.exit(130)


def _remove_if_empty(cfg: DictConfig) -> None:
    """Hydra creates the run dir before the job starts; leave no empty dir behind a config error."""
    with contextlib.suppress(Exception):
        Path(cfg.output_dir).rmdir()  # only succeeds when empty
