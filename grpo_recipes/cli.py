"""Command-line sugar applied before Hydra parses the arguments (kept import-light)."""
from __future__ import annotations

import re
from pathlib import Path


def rewrite_model_path(argv: list[str], config_dir: Path) -> list[str]:
    """`model=<hub id or path>` -> `model=custom model.path=<it>` when it names no model config.

    `model=smollm2_135m` still picks config/model/smollm2_135m.yaml; sweeps (`a,b`) are left alone.
    """
    options = {p.stem for p in (config_dir / "model").glob("*.yaml")}
    out = argv[:1]
    for arg in argv[1:]:
        match = re.fullmatch(r"model=(.+)", arg)
        value = match.group(1) if match else None
        if value and value not in options and "," not in value and not value.startswith(("choice(", "range(")):
            name = Path(value.rstrip("/")).name or value
            out += ["model=custom", f"model.path={value}", f"model.name={name}"]
        else:
            out.append(arg)
    return out
