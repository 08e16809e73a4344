"""metrics.jsonl, train.log and the console (and the no-signal warning), and the JSON helpers: JSON lines are
appended whole and synced, so an interrupted run keeps every line before it; other files are replaced
atomically."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from transformers import TrainerCallback
from transformers.integrations.integration_utils import rewrite_logs
from transformers.trainer_callback import ProgressCallback

log = logging.getLogger(__name__)


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps(r, default=str) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of `path` (none when it does not exist); a line cut by a crash is skipped."""
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def eval_file(out_dir: Path, step: int) -> Path:
    return out_dir / f"eval_step_{step}.json"


def eval_files(run_dir: Path) -> dict[int, Path]:
    """A run's eval_results/eval_step_<N>.json by step, in step order."""
    paths = Path(run_dir, "eval_results").glob("eval_step_*.json")
    return dict(sorted((int(p.stem.rsplit("_", 1)[1]), p) for p in paths))


def load_evals(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {step: json.loads(path.read_text()) for step, path in eval_files(run_dir).items()}


def drop_evals_after(run_dir: Path, step: int) -> int:
    """Remove the eval files of steps after `step` (a resume evaluates those steps again; left, the report and
    a sweep's summary would take a discarded eval for the last one); returns how many."""
    late = [path for s, path in eval_files(run_dir).items() if s > step]
    for path in late:
        path.unlink()
    return len(late)


def is_eval_log(logs: dict[str, Any]) -> bool:
    return any(k.startswith("eval_") for k in logs)


def append_metrics(path: Path, step: int, logs: dict[str, Any]) -> None:
    """One line of metrics.jsonl, keys named as `rewrite_logs` names them for wandb (non-finite: null)."""
    record = {"step": step, "split": "eval" if is_eval_log(logs) else "train", "time": round(time.time(), 3)}
    for k, v in rewrite_logs(logs).items():
        record[k] = None if isinstance(v, float) and not math.isfinite(v) else v
    append_jsonl(path, [record])


class MetricsFileCallback(TrainerCallback):
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_metrics(self.path, state.global_step, logs)


class ConciseProgressCallback(ProgressCallback):
    """The progress bar plus one readable line per logging step instead of a raw dict."""

    SHOWN: ClassVar[dict[str, str]] = {"reward": "reward {:.3f}", "reward_std": "std {:.3f}"}
    SHOWN |= {"completions/mean_length": "len {:.1f}", "entropy": "entropy {:.3f}", "kl": "kl {:.4f}"}
    SHOWN |= {"learning_rate": "lr {:.1e}", "step_time": "s/step {:.1f}"}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or not logs or is_eval_log(logs):
            return  # the evaluation callback prints its own summary
        if "train_runtime" in logs:
            self.training_bar.write(f"trained {state.global_step} steps in {logs['train_runtime']:.0f} s")
            return
        numbers = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
        parts = [f"step {state.global_step}/{state.max_steps}"]
        parts += [shown.format(numbers[key]) for key, shown in self.SHOWN.items() if key in numbers]
        for k, v in numbers.items():
            if k.startswith("rewards/") and k.endswith("/mean"):
                parts.append(f"{k.split('/')[1]} {v:.3f}")
        for k, v in numbers.items():  # dataset.curriculum
            if k.startswith("curriculum/") and k.endswith("/level"):
                parts.append(f"{k.split('/')[1]} level {v:g}")
        self.training_bar.write(" | ".join(parts))


class _Tee:
    """Mirrors a console stream into train.log."""

    def __init__(self, stream, log_file):
        self.stream, self.log_file, self.pending = stream, log_file, ""

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.pending += text.replace("\r\n", "\n")
        *lines, self.pending = self.pending.split("\n")
        for line in lines:  # a progress bar redraws with \r: keep what was last drawn
            self.log_file.write(line.rsplit("\r", 1)[-1] + "\n")
        self.log_file.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log_file.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def write_to_log_file(text: str) -> None:
    """Into train.log alone, not the console (a crash's traceback)."""
    if (log_file := getattr(sys.stderr, "log_file", None)) is not None:
        log_file.write(text.rstrip("\n") + "\n")
        log_file.flush()


def setup_console(run_dir: Path | None, main: bool = True) -> None:
    """Log lines to the console (other ranks: warnings only), mirrored into train.log."""
    if run_dir is not None:  # the tee first, so the log handler below writes through it
        log_file = open(run_dir / "train.log", "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        sys.stdout = _Tee(sys.stdout, log_file)
        sys.stderr = _Tee(sys.stderr, log_file)
    logging.basicConfig(
        level=logging.INFO if main else logging.WARNING,
        datefmt="%H:%M:%S",
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    for noisy in ("httpx", "urllib3", "filelock", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# A warning after `grpo.no_signal_warning` logged steps in a row with `frac_reward_zero_std` = 1 (no
# gradient), naming the likely cause from the step's metrics.
def likely_cause(logs: dict[str, float], max_completion_length: int | None) -> str:
    accuracies = [v for k, v in logs.items() if k.startswith("accuracy/") and isinstance(v, (int, float))]
    clipped = logs.get("completions/clipped_ratio", 0.0) or 0.0
    if clipped >= 0.5:
        return (
            f"{clipped:.0%} of completions were cut off at max_completion_length={max_completion_length}: "
            "the answers need more tokens (raise grpo.max_completion_length)"
        )
    if accuracies and max(accuracies) == 0.0:
        return (
            "no completion was correct: the task is too hard for the model as it is (an easier task config, "
            "or a larger grpo.num_generations for more chances of a correct one)"
        )
    if accuracies and min(accuracies) == 1.0:
        return "every completion was correct: the task is too easy (a harder task config)"
    return "the rewards cannot vary for these completions: check each reward's options and weight"


class NoSignalWarning(TrainerCallback):
    streak, warned = 0, False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not args.no_signal_warning or not logs or "frac_reward_zero_std" not in logs:  # 0: off
            return
        self.streak = self.streak + 1 if logs["frac_reward_zero_std"] >= 1.0 else 0
        if self.streak >= args.no_signal_warning and not self.warned and state.is_world_process_zero:
            self.warned = True
            log.warning(
                f"No learning signal for {self.streak} steps in a row (step {state.global_step}): every "
                "prompt group's completions got the same reward, so GRPO had no gradient. Likely cause: "
                f"{likely_cause(logs, args.max_completion_length)}"
            )
