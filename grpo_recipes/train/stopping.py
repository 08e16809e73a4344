"""Clean stops (README "Stopping and resuming", "When things go wrong"): on SIGTERM or Ctrl-C, and when a
reward fails too often (rewards/guard.py). The ranks agree after every step (one all-reduce of the stop
code), so all stop after the same step and the checkpoint save, a collective under DeepSpeed and FSDP,
cannot hang."""

import collections
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_recipes.outputs.logs import write_atomic, write_to_log_file

log = logging.getLogger(__name__)
REWARD_ERRORS = 1  # the stop code of a reward failing too often (the others are signal numbers)


class GracefulStop(TrainerCallback):
    def __init__(self, accelerator, faults=None):
        self.accelerator = accelerator  # the trainer's: the ranks agree on a stop through it
        self.faults = faults  # rewards.guard.RewardFaults: failed calls per step
        self.signum: int | None = None  # the signal this process received, or REWARD_ERRORS
        self.agreed: int | None = None  # the one all ranks stop on (another rank's, possibly)
        self.reason = ""  # why, in words, when not a signal
        self._previous = {}
        self.window: dict[str, collections.deque] = {}  # reward name -> (calls, failed) of its last steps
        self.updating_from: int | None = None  # the step an optimizer update started from (crash saves)

    def install(self) -> None:
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.signum not in (None, REWARD_ERRORS):  # second signal: stop now
            raise KeyboardInterrupt
        self.signum = signum
        log.warning(
            "%s received: finishing this step, saving a checkpoint and stopping (again to stop at once)",
            signal.Signals(signum).name,
        )

    @property
    def requested(self) -> bool:  # with several processes, a signal counts from the next step's end
        return self.agreed is not None or (self.accelerator.num_processes == 1 and self.signum is not None)

    @property
    def exit_code(self) -> int:
        code = self.signum or self.agreed or 0
        return 1 if code == REWARD_ERRORS else 128 + code

    def consistent(self, step: int) -> bool:  # the weights, optimizer and scheduler are all `step`'s
        return self.updating_from is None or step > self.updating_from

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.updating_from = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if self.faults is not None and self.signum is None:
            self._count_reward_errors(args)
        if not self.agreed and self.accelerator.num_processes == 1:
            self.agreed = self.signum
        elif not self.agreed:  # the highest signal number any rank has received (0: none has)
            import torch

            mine = torch.tensor([self.signum or 0], device=self.accelerator.device)
            self.agreed = int(self.accelerator.reduce(mine, reduction="max").item()) or None
        if self.requested:
            control.should_save = True
            control.should_training_stop = True

    def _count_reward_errors(self, args) -> None:
        for name, (calls, failed) in self.faults.take().items():
            self.window.setdefault(name, collections.deque(maxlen=args.reward_errors_window))
            self.window[name].append((calls, failed))
        for name, steps in self.window.items():
            calls, failed = (sum(column) for column in zip(*steps))
            if len(steps) == steps.maxlen and calls and failed / calls >= args.reward_errors_stop_at:
                self.signum = REWARD_ERRORS
                self.reason = (
                    f"reward '{name}' failed {failed} of {calls} calls over the last {len(steps)} steps "
                    f"(grpo.reward_errors_stop_at={args.reward_errors_stop_at:g}); first error: "
                    f"{self.faults.first[name]}; every failure is in reward_errors.jsonl"
                )
                return


def trim_metrics_after(path: Path, step: int) -> int:
    """Drop metrics.jsonl lines of steps after `step` (and any line cut by a crash); returns how many."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
                continue
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
        dropped += 1
    write_atomic(path, "".join(k + "\n" for k in kept))
    return dropped


class Interrupted(Exception):
    """Training stopped after saving what it could and saying why; args[0] is the exit code."""


def resume_command(cfg: dict[str, Any]) -> str:
    """The command that continues this run: its config flags and directory (its overrides are read back)."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    args = []
    if HydraConfig.initialized():
        hydra = HydraConfig.get()
        for source in hydra.runtime.config_sources:
            if source.provider == "command-line" and source.schema == "file":
                args += ["--config-dir", source.path]
        if hydra.job.config_name != "train":
            args += ["--config-name", hydra.job.config_name]
    run_dir = Path(cfg["output_dir"]).resolve()
    if run_dir == (Path(cfg["output_root"]) / cfg["run_name"]).resolve():
        args.append(f"run_name={cfg['run_name']}")
        if cfg["output_root"] != "outputs":
            args.append(f"output_root={cfg['output_root']}")
    else:  # a sweep's job, or a directory of its own
        args.append(f"hydra.run.dir={run_dir}")
    return "python train_grpo.py " + " ".join(shlex.quote(a) for a in args + ["resume=true"])


def stopped(cfg: dict[str, Any], run_dir: Path, training) -> Interrupted:
    """A stop all ranks agreed on (a signal, a failing reward), its checkpoint saved: the report, why, and
    the command that continues."""
    _report(training.trainer, run_dir)
    if training.stop.reason:
        log.error("Stopping: %s", training.stop.reason)
    step = training.trainer.state.global_step
    log.warning(f"Stopped at step {step} with checkpoint-{step} saved. Continue with: {resume_command(cfg)}")
    # A rank that exits non-zero makes torchrun end the others: none leaves before rank 0 has said the above
    training.trainer.accelerator.wait_for_everyone()
    return Interrupted(training.stop.exit_code)


def crashed(err: Exception, cfg: dict[str, Any], run_dir: Path, training) -> Exception:
    """An error inside training: its traceback into train.log, one line on the console, and a checkpoint of
    the last whole step when one process runs (a save is a collective other ranks may never reach)."""
    import traceback

    from grpo_common.errors import ConfigError
    from grpo_recipes.config.resume import last_checkpoint_step

    trainer, stop = training.trainer, training.stop
    if isinstance(err, ConfigError) or full_disk(err, cfg, say=False):
        return err
    write_to_log_file(traceback.format_exc())
    step, saved = trainer.state.global_step, ""
    one_process = trainer.accelerator.num_processes == 1
    if step and not (run_dir / f"checkpoint-{step}").is_dir() and stop.consistent(step) and one_process:
        try:  # our override (outputs/checkpoints.py): the checkpoint is whole or absent
            trainer._save_checkpoint(trainer.model, trial=None)
            saved = f"checkpoint-{step} saved (the last completed step). "
        except Exception as again:  # noqa: BLE001 - the first error is the one to report
            write_to_log_file(f"saving checkpoint-{step} after the crash failed: {again!r}")
    last = last_checkpoint_step(run_dir)
    error = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
    where = f"checkpoint-{last}" if last is not None else "the start"
    log.error(
        f"Training failed in step {step + 1}: {error} (traceback: {run_dir / 'train.log'}). {saved}Continue "
        f"from {where} with: {resume_command(cfg)}"
    )
    # after the line: a rank that crashed too may exit first, and torchrun then ends this one (no barrier
    # here: another rank may not have crashed, and would never reach it)
    _report(trainer, run_dir)
    return Interrupted(1)


def full_disk(err: BaseException, cfg, say: bool = True) -> bool:
    """Whether `err` is a full disk, however the writer words it (torch's zip writer says only "file write
    failed"); `say`: one line naming the path and its free space, a cut-short save's space given back."""
    import errno
    import shutil

    run_dir, text = Path(cfg["output_dir"]), str(err)
    said = getattr(err, "errno", None) == errno.ENOSPC or "No space left" in text or "StorageFull" in text
    if not said and ("write failed" not in text or shutil.disk_usage(run_dir).free > 256 * 2**20):
        return False
    if say:
        shutil.rmtree(run_dir / ".saving", ignore_errors=True)  # outputs/checkpoints.py's staging dir
        path = Path(getattr(err, "filename", None) or run_dir)
        free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free
        print(
            f"error: no space left on the device writing {path} ({free / 2**20:.0f} MiB free there). The "
            "checkpoints saved before are intact: free some space, then continue with: "
            f"{resume_command(cfg)}",
            file=sys.stderr,
        )
    return True


def _report(trainer, run_dir: Path) -> None:
    if trainer.is_world_process_zero():
        with contextlib.suppress(Exception):  # a report is a summary: never a second error
            from grpo_recipes.outputs.report import write_report

            write_report(run_dir)
