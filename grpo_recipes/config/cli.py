"""Command-line sugar applied before Hydra parses the arguments (kept import-light), and TRL's names for
the recipe's keys: TRL's scripts take `--model_name_or_path`, `--use_peft`, GRPOConfig fields at the top
level...; here they live in the `model` and `grpo` groups. The command line accepts TRL's spelling
(rewritten into ours); a YAML file that uses it gets a message naming our key."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path

from grpo_recipes.config.knobs import SCHEMA

# Open mappings: any GRPOConfig field, task, reward or transfer set may be named, not only those in the YAML:
# `key=value` becomes `++key=value`, and the recipe's check names a bad key (close matches) instead of Hydra's
# error.
OPEN_PREFIXES = ("grpo.", "dataset.tasks.", "dataset.rewards.", "eval.transfer.", "sandbox.")


def rewrite_argv(argv: list[str], config_dir: Path) -> list[str]:
    """Command-line sugar, before Hydra parses it: `model=<hub id or local path>` -> `model=custom
    model.path=<it>`, or the preset for that hub id (select_model); TRL's spelling into ours
    (`model_name_or_path=X` as `model=X`, MODEL_FIELDS, `num_generations=4` -> `grpo.num_generations=4`,
    `report_to=wandb` -> `logger=wandb`); `grpo.x=1` -> `++grpo.x=1` (OPEN_PREFIXES); -m to the front."""
    loggers = {p.stem for p in (config_dir / "logger").glob("*.yaml")}
    # the top-level knobs and every group, declared or a folder: never rewritten into grpo
    ours = {k.split(".")[0] for k in SCHEMA} | {p.name for p in config_dir.iterdir() if p.is_dir()}
    # Hydra's argparse rejects overrides on both sides of -m; accept it anywhere.
    flags = [a for a in argv[1:] if a in ("-m", "--multirun")]
    out = argv[:1] + flags
    for arg in (a for a in argv[1:] if a not in flags):
        match = re.fullmatch(r"(\+{0,2})([\w.]+)=(.*)", arg)
        prefix, key, value = match.groups() if match else ("", "", "")
        if key in ("model", "model_name_or_path", "model.model_name_or_path"):
            out += select_model(value, key != "model", config_dir / "model") or [arg]
        elif key in QUANTIZE_FLAGS:
            out.append(f"model.lora.quantize={QUANTIZE_FLAGS[key] if value.lower() == 'true' else 'null'}")
        elif key in MODEL_FIELDS:
            out.append(f"{MODEL_FIELDS[key]}={value}")
        elif key == "report_to" and not prefix and value in loggers:
            out.append(f"logger={value}")
        elif key and "." not in key and key not in ours and key in grpo_field_names():
            out.append(f"++grpo.{key}={value}")
        elif arg.startswith(OPEN_PREFIXES) and "=" in arg:
            out.append("++" + arg)
        else:
            out.append(arg)
    return out


def select_model(value: str, any_value: bool, model_dir: Path) -> list[str] | None:
    """The overrides that pick model `value`: a preset (config/model/*.yaml), the preset for that hub id, or
    model=custom; None: leave `model=value` to Hydra (an option, or a typo that gets the close ones).
    `any_value`: TRL's model_name_or_path, always a model path or id."""
    presets = sorted(model_dir.glob("*.yaml"))
    if value in {p.stem for p in presets}:
        return [f"model={value}"]
    if "/" in value:  # a hub id a preset is for
        import yaml

        for p in reversed(presets):  # two presets for one id: the last by name, as it always was
            if ((yaml.safe_load(p.read_text()) or {}).get("model") or {}).get("path") == value:
                return [f"model={p.stem}"]  # presets are `# @package _global_`
    if not (any_value or _names_models(value)):
        return None
    out = ["model=custom", f"model.path={value}"]
    return out + ([f"model.name={model_name_from_path(value)}"] if "," not in value else [])


def _names_models(value: str) -> bool:
    """Local directories or hub ids (org/name), one or a sweep of them (`a/b,c/d`); a bare word is a
    model option (a typo gets the close ones)."""
    if value.startswith(("choice(", "range(", "glob(")):
        return False
    return all("/" in v or Path(v).expanduser().exists() for v in value.split(","))


def model_name_from_path(value: str) -> str:
    """'Qwen/Qwen2.5-0.5B' -> 'Qwen2.5-0.5B'; 'outputs/run1/final' -> 'run1-final' (checkpoints too)."""
    path = Path(value.rstrip("/"))
    if re.fullmatch(r"final|checkpoint-\d+", path.name) and path.parent.name:
        return f"{path.parent.name}-{path.name}"
    return path.name or value


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
