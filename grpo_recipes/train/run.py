"""One job of train_grpo.py, in one straight line: check the config and the run directory, assemble the run
(assemble.py), build the trainer (trainer.py), then train or evaluate alone, and write the outputs. Nothing is
written before everything is checked."""

import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from grpo_common.errors import ConfigError
from grpo_recipes.config import resume
from grpo_recipes.config.checks import check_config
from grpo_recipes.config.trainer_args import checked_here
from grpo_recipes.models.hardware import half_precision_warning, malloc_tuning
from grpo_recipes.outputs.logs import append_metrics, drop_evals_after, load_evals, setup_console
from grpo_recipes.train.assemble import Setup, assemble
from grpo_recipes.train.stopping import Interrupted, crashed, full_disk, stopped, trim_metrics_after
from grpo_recipes.train.trainer import Training, build_trainer, describe, eval_model, make_evaluator

log = logging.getLogger("grpo_recipes")


@contextlib.contextmanager
def console(run_dir: Path | None, main: bool):
    saved = sys.stdout, sys.stderr
    setup_console(run_dir, main=main)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def ignore_trl_deprecations() -> None:
    """TRL 1.16 still calls transformers' deprecated gradient_checkpointing aliases (every step; around each
    generation when checkpointing is on): not the user's to fix."""
    warnings.filterwarnings(
        "ignore",
        message=".*(is_gradient_checkpointing|gradient_checkpointing_(en|dis)able).*",
        category=FutureWarning,
    )


def train(cfg: DictConfig) -> float:
    """Returns the final fixed eval's `optimized_metric` (for sweepers: hparams_search)."""
    ignore_trl_deprecations()
    container = OmegaConf.to_container(cfg, resolve=True)
    run_dir = Path(container["output_dir"])
    main = int(os.environ.get("RANK", "0")) == 0
    with console(None, main):
        if not checked_here(container):  # a search's sampled values, a job launched elsewhere
            check_config(container)
        plan = resume.plan_run(run_dir, container["resume"], container["eval_only"], main)
        if plan.action == "finished":  # a sweep job (a single run stops before Hydra: preflight.py)
            resume.check_finished(run_dir, container["max_steps"])
            log.info(resume.finished_message(run_dir))
            evals = load_evals(run_dir)  # its objective, from its last fixed eval
            return float(evals[max(evals)]["metrics"][container["optimized_metric"]]) if evals else 0.0
        if plan.action == "resume" and main:
            if (saved := resume.saved_config(run_dir)) is not None:
                resume.check_changes(run_dir, saved, container)
            resume.check_resume_point(run_dir, container["max_steps"])
        setup = assemble(container, plan)
        training = None if container["eval_only"] else build_trainer(container, run_dir, setup)
    # Only now, with everything built, is anything written: a mistake found above leaves no trace.
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    with console(run_dir if main else None, main):
        if main and not (run_dir / "config.yaml").exists():  # written once, when the run starts: what it is
            OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
        if main and HydraConfig.initialized():  # this job's overrides, a new entry of overrides.yaml
            resume.record_overrides(run_dir, list(HydraConfig.get().overrides.task), plan.action == "resume")
        try:
            if training is None:
                return eval_only(container, run_dir, setup)
            return _train(container, run_dir, setup, training)
        finally:  # close this job's wandb run: the next job of a multirun must start its own
            wandb = sys.modules.get("wandb")
            if wandb is not None and getattr(wandb, "run", None) is not None:
                wandb.finish()
                wandb.teardown()  # settings (WANDB_DIR) are cached per process; the next job reads them anew


def eval_only(cfg: dict[str, Any], run_dir: Path, s: Setup) -> float:
    """The fixed evaluation alone on the assembled run `s` (train/assemble.py), as a training run's evals."""
    from accelerate import Accelerator
    from transformers import TrainerState

    from grpo_recipes.outputs.report import write_report

    # The precision training would use (the Trainer wraps forward in bf16 autocast when bf16 is on),
    # so that eval_only on a checkpoint reproduces that run's eval exactly.
    mixed = "bf16" if s.args.bf16 else ("fp16" if s.args.fp16 else "no")
    accelerator = Accelerator(cpu=s.args.use_cpu, mixed_precision=mixed)  # where training runs
    describe(cfg, run_dir, s, accelerator)
    model = eval_model(s, accelerator)
    state = Path(cfg["model"]["path"]).expanduser() / "trainer_state.json"  # a checkpoint's; base model: 0
    step = TrainerState.load_from_json(str(state)).global_step if state.is_file() else 0
    metrics, _ = make_evaluator(cfg, s).run(model, accelerator, step, run_dir / "eval_results")
    if accelerator.is_main_process:
        append_metrics(run_dir / "metrics.jsonl", step, {f"eval_{k}": v for k, v in metrics.items()})
        write_report(run_dir)
    return float(metrics[cfg["optimized_metric"]])


def _train(cfg: dict[str, Any], run_dir: Path, s: Setup, training: Training) -> float:
    trainer, stop = training.trainer, training.stop
    describe(cfg, run_dir, s, trainer.accelerator)
    if training.optimizer:
        log.info(training.optimizer)
    elif warning := half_precision_warning(s.model, cfg["model"], cfg["learning_rate"]):
        log.warning(warning)
    if (lora := s.peft_config) is not None:
        targets = lora.target_modules if isinstance(lora.target_modules, str) else sorted(lora.target_modules)
        log.info("LoRA r=%d alpha=%g on %s", lora.r, lora.lora_alpha, targets)
    log.info("Fast paths: %s; %s", training.speedups, malloc_tuning())
    if s.args.use_vllm:
        log.info("fixed eval generates with the trainer's vLLM engine (%s)", trainer.vllm_generation.mode)
    n_train = sum(t.numel() for t in trainer.model.parameters() if t.requires_grad)
    n_all = sum(t.numel() for t in trainer.model.parameters())
    log.info(f"Training {n_train / 1e6:.2f} M of {n_all / 1e6:.2f} M parameters ({n_train / n_all:.2%})")
    if s.resumed:  # from the last checkpoint, or from the start when the run stopped before its first
        step = int(s.checkpoint.name.split("-")[-1]) if s.checkpoint is not None else -1
        dropped = evals = 0
        if trainer.is_world_process_zero():  # the steps after the checkpoint are logged and evaluated again
            dropped = trim_metrics_after(run_dir / "metrics.jsonl", step)
            trim_metrics_after(run_dir / "samples.jsonl", step)
            evals = drop_evals_after(run_dir, step)
        log.info(
            f"Resuming from {s.checkpoint or 'the start: no checkpoint was saved'} ({dropped} metric lines "
            f"and {evals} eval files after step {max(step, 0)} dropped: they are written again)"
        )
    stop.install()
    try:
        result = trainer.train(resume_from_checkpoint=str(s.checkpoint) if s.checkpoint else None)
    except Exception as err:  # noqa: BLE001 - any error: what can be saved is saved (stopping.crashed)
        raise crashed(err, cfg, run_dir, training) from None
    finally:
        stop.uninstall()
    from grpo_recipes.models.weights import save_final_model, save_merged_model  # after training only
    from grpo_recipes.outputs.report import write_report

    if stop.requested:  # a signal, or a reward failing too often: checkpoint saved, report, the command
        raise stopped(cfg, run_dir, training)

    final = run_dir / "final"
    save_final_model(trainer, final)  # the adapter alone when LoRA is on; ZeRO-3/FSDP shards gathered
    if lora is not None and cfg["model"]["lora"]["merge_on_save"] and trainer.is_world_process_zero():
        save_merged_model(final, run_dir / "final-merged", s.tokenizer)
    history = training.evaluation.history
    first, last = min(history), max(history)
    before, after = history[first]["accuracy"], history[last]["accuracy"]
    metrics = {
        **result.metrics,
        "baseline_eval_accuracy": before,
        "final_eval_accuracy": after,
        "final_eval_step": last,
        "optimized_metric": cfg["optimized_metric"],  # what a sweeper was given (sweep.py reads it back)
        "objective": history[last][cfg["optimized_metric"]],
    }
    if trainer.is_world_process_zero():
        trainer.state.save_to_json(str(final / "trainer_state.json"))  # lets eval_only know the step
        trainer.save_metrics("train", metrics, combined=False)
        report = write_report(run_dir)
        log.info(
            f"Fixed eval accuracy: step {first} {before:.3f} -> step {last} {after:.3f} | report: {report}"
        )
    return float(history[last][cfg["optimized_metric"]])


def run_from_hydra(cfg: DictConfig) -> float:
    try:
        return train(cfg)
    except ConfigError as err:
        with contextlib.suppress(Exception):  # Hydra created the run dir: leave none behind, if empty
            Path(cfg.output_dir).rmdir()
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as err:  # a stop that said why and how to continue
        sys.exit(err.args[0])
    except Exception as err:  # a full disk: one line
        if not full_disk(err, cfg):
            raise
        sys.exit(1)
    except KeyboardInterrupt:
        print(
            "interrupted: files written so far are kept; resume=true continues from the last checkpoint",
            file=sys.stderr,
        )
        sys.exit(130)
