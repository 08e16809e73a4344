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
    from grpo_recipes.models.hardware import detect_hardware

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    # The same CPU model name comes with and without native bf16, and a run's precision follows it
    # (bf16 autocast or fp32): its speed and its numbers differ.
    precision = "native bf16" if detect_hardware().bf16 else "no native bf16"
    return (
        f"{cpu}, {os.cpu_count()} cores, {gpu}, {precision}, Python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )


def timed(fn, repeat: int) -> tuple[float, list[float], object]:
    """Median seconds of `repeat` calls (and all of them, and the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


def default_setup(eval_size: int | None = None, dtype: str = "auto"):
    """The default run's composed config, data, model and tokenizer (as train_grpo.py builds them, with
    `model.dtype=<dtype>`)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from grpo_recipes.config.knobs import register
    from grpo_recipes.models.hardware import detect_hardware
    from grpo_recipes.models.loading import load_model_and_tokenizer
    from grpo_recipes.train.data import build_datasets
    from grpo_recipes.train.run import ignore_trl_deprecations

    register()  # the declared defaults, as train_grpo.py registers them
    ignore_trl_deprecations()  # as a run does
    overrides = [f"model.dtype={dtype}"] + ([f"eval.size={eval_size}"] if eval_size else [])
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "config")):
        cfg = compose("train", overrides=overrides)
    cfg.output_dir = "/tmp/unused"
    cfg = OmegaConf.to_container(cfg, resolve=True)
    taskset, train, eval_rows = build_datasets(cfg["dataset"], cfg["eval"])
    hw = detect_hardware()
    model, tokenizer = load_model_and_tokenizer(cfg["model"], hw, seed=cfg["seed"], grpo=cfg["grpo"])
    return cfg, taskset, train, eval_rows, model, tokenizer


# Qwen2.5-0.5B-Instruct's shape (its config.json), for target 7: random weights, nothing downloaded.
QWEN25_05B_SHAPE = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1e6,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
}


def qwen25_05b_shaped_model(dtype, seed: int = 0):
    """A Qwen2 model with Qwen2.5-0.5B's shape and random weights (the embedded tokenizer's ids fit its
    vocab)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B_SHAPE, bos_token_id=1, eos_token_id=2, pad_token_id=2))
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    return model.to(dtype)


def git_rev() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    except Exception:  # noqa: BLE001
        return "unknown"
