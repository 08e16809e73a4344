"""Shared by the benchmark scripts: the machine, medians, and the default run's data and model."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    import torch

    cpu = "unknown CPU"
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}, Python {platform.python_version()}, torch {torch.__version__}"


def timed(fn, repeat: int) -> tuple[float, list[float], object]:
    """Median seconds of `repeat` calls (and all of them, and the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


def default_setup(eval_size: int | None = None):
    """The default run's composed config, data, model and tokenizer (as train_grpo.py builds them)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from grpo_recipes.data import build_datasets
    from grpo_recipes.models import load_model_and_tokenizer

    overrides = [f"eval.size={eval_size}"] if eval_size else []
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "config")):
        cfg = compose("train", overrides=overrides)
    cfg.output_dir = "/tmp/unused"
    cfg = OmegaConf.to_container(cfg, resolve=True)
    taskset, train, eval_rows = build_datasets(cfg["dataset"], cfg["eval"])
    model, tokenizer = load_model_and_tokenizer(cfg["model"], on_gpu=False, seed=cfg["seed"])
    return cfg, taskset, train, eval_rows, model, tokenizer


def git_rev() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    except Exception:  # noqa: BLE001
        return "unknown"
