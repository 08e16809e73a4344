"""Command-line sugar applied before Hydra parses the arguments (kept import-light)."""

from __future__ import annotations

import re
from pathlib import Path

# Open mappings: any GRPOConfig field, any task, any reward may be named on the command line,
# not only those already in the YAML. `key=value` becomes Hydra's add-or-override `++key=value`,
# and the recipe's own validation names a bad key (with close matches) instead of Hydra's struct error.
OPEN_PREFIXES = ("grpo.", "dataset.tasks.", "dataset.rewards.", "sandbox.")


def rewrite_argv(argv: list[str], config_dir: Path) -> list[str]:
    """Command-line sugar, before Hydra parses it.

    `model=<hub id or path>` -> `model=custom model.path=<it>` when it names no model config and is
    a local path or a hub id (org/name).

    `model=smollm2_135m` still picks config/model/smollm2_135m.yaml; sweeps (`a,b`) are left alone.
    Also: `grpo.x=1` -> `++grpo.x=1` (see OPEN_PREFIXES), and -m/--multirun moves to the front.
    """
    options = {p.stem for p in (config_dir / "model").glob("*.yaml")}
    # Hydra's argparse rejects overrides on both sides of -m; accept it anywhere.
    flags = [a for a in argv[1:] if a in ("-m", "--multirun")]
    out = argv[:1] + flags
    for arg in (a for a in argv[1:] if a not in flags):
        match = re.fullmatch(r"model=(.+)", arg)
        value = match.group(1) if match else None
        if value and value not in options and _names_models(value):
            out += ["model=custom", f"model.path={value}"]
            if "," not in value:
                out.append(f"model.name={model_name_from_path(value)}")
        elif arg.startswith(OPEN_PREFIXES) and "=" in arg:
            out.append("++" + arg)
        else:
            out.append(arg)
    return out


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
