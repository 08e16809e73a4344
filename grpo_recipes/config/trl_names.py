"""TRL's names for the recipe's keys, so that a TRL user's habits work (import-light).

TRL's scripts take `--model_name_or_path`, `--per_device_train_batch_size`, `--use_peft` ... at
the top level; here the same knobs live in the `model` and `grpo` groups. The command line
accepts TRL's spelling (cli.py rewrites it into ours); a YAML file that uses it gets a message
naming our key.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

# TRL's ModelConfig fields (and the trl CLI's flags) -> the recipe's key. model_name_or_path picks a
# model the way `model=<id>` does (cli.py), so it is handled there.
MODEL_FIELDS = {
    "model_name_or_path": "model.path",
    "model.model_name_or_path": "model.path",
    "dtype": "model.dtype",
    "torch_dtype": "model.dtype",
    "model.torch_dtype": "model.dtype",
    "attn_implementation": "model.attn_implementation",
    "use_peft": "model.lora.enabled",
    "lora_r": "model.lora.r",
    "lora_alpha": "model.lora.alpha",
    "lora_dropout": "model.lora.dropout",
    "lora_target_modules": "model.lora.target_modules",
    "load_in_4bit": "model.lora.quantize",  # true -> 4bit
    "load_in_8bit": "model.lora.quantize",  # true -> 8bit
}
QUANTIZE_FLAGS = {"load_in_4bit": "4bit", "load_in_8bit": "8bit"}


def trl_hint(key: str) -> str:
    """' key is TRL's name; here it is model.path.' for a key TRL spells differently, else ''."""
    ours = MODEL_FIELDS.get(key)
    if ours is None and "." not in key and key in grpo_field_names():
        ours = f"grpo.{key}"
    return f" {key} is TRL's name; here it is {ours}." if ours else ""


# GRPOConfig's dataclass and the classes it extends, in the pinned TRL and transformers.
GRPO_CONFIG_CLASSES = (
    ("trl.trainer.grpo_config", "GRPOConfig"),
    ("trl.trainer.base_config", "_BaseConfig"),
    ("transformers.training_args", "TrainingArguments"),
)


@functools.cache
def grpo_field_names() -> frozenset[str]:
    """GRPOConfig's field names, read from TRL's and transformers' source without importing them (an
    import takes seconds; this is for the command line). tests/test_trl_names.py checks it against
    dataclasses.fields(GRPOConfig)."""
    names: set[str] = set()
    for module, cls in GRPO_CONFIG_CLASSES:
        spec = importlib.util.find_spec(module)
        tree = ast.parse(Path(spec.origin).read_text())
        body = next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        names |= {
            n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
    return frozenset(names)
