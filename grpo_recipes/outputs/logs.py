"""What a run writes besides checkpoints: metrics.jsonl, train.log, config.yaml, and the console.

Only the main process writes files. metrics.jsonl gets one JSON object per logged step (train
and eval), appended and flushed as the run goes, so an interrupted run keeps every line.
"""

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


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def is_eval_log(logs: dict[str, Any]) -> bool:
    return any(k.startswith("eval_") for k in logs)


class MetricsFileCallback(TrainerCallback):
    """Appends every `on_log` event to metrics.jsonl:
    `{"step", "split": train|eval, "train/..." | "eval/..."}`.

    Names are transformers' `rewrite_logs` form, the same that wandb and TensorBoard show.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            append_metrics(self.path, state.global_step, logs)


def append_metrics(path: Path, step: int, logs: dict[str, Any]) -> None:
    """One line, written whole and synced: an interrupted run keeps every line before it."""
    record = {"step": step, "split": "eval" if is_eval_log(logs) else "train", "time": round(time.time(), 3)}
    record.update({k: _jsonable(v) for k, v in rewrite_logs(logs).items()})
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


class ConciseProgressCallback(ProgressCallback):
    """The progress bar (with ETA) plus one readable line per logging step instead of a raw dict."""

    KEYS: ClassVar[list[tuple[str, str, str]]] = [
        ("reward", "reward", "{:.3f}"),
        ("reward_std", "std", "{:.3f}"),
        ("completions/mean_length", "len", "{:.1f}"),
        ("entropy", "entropy", "{:.3f}"),
        ("kl", "kl", "{:.4f}"),
        ("learning_rate", "lr", "{:.1e}"),
        ("step_time", "s/step", "{:.1f}"),
    ]

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        if is_eval_log(logs):
            return  # the evaluation callback prints its own summary
        if "train_runtime" in logs:
            self.training_bar.write(f"trained {state.global_step} steps in {logs['train_runtime']:.0f} s")
            return
        parts = [f"step {state.global_step}/{state.max_steps}"]
        parts += [
            f"{label} {fmt.format(logs[key])}"
            for key, label, fmt in self.KEYS
            if isinstance(logs.get(key), (int, float))
        ]
        parts += [
            f"{k.split('/')[1]} {v:.3f}"
            for k, v in logs.items()
            if k.startswith("rewards/") and k.endswith("/mean") and isinstance(v, (int, float))
        ]
        parts += [  # dataset.curriculum
            f"{k.split('/')[1]} level {v:g}"
            for k, v in logs.items()
            if k.startswith("curriculum/") and k.endswith("/level") and isinstance(v, (int, float))
        ]
        self.training_bar.write(" | ".join(parts))


class _Tee:
    """Mirrors a console stream into train.log, keeping only the final state of \\r-updated lines."""

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


def setup_console(run_dir: Path | None, main: bool = True) -> None:
    """Log lines to the console (other ranks: warnings only), and mirror the whole console into train.log."""
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
