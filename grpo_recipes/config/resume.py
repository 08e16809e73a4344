"""A run's directory is the user's data: what a command may do with an existing one. `resume=false` (the
default) starts a new run and refuses a directory that holds one, naming both ways out; `resume=true`
continues it from its last checkpoint (from the start when it stopped before its first) and refuses when there
is none; `resume=auto` continues an unfinished run or starts it (sweeps, requeues re-issuing one command).

A resume continues exactly what the run was: its own saved overrides (overrides.yaml) are composed again, so
the command printed at a stop works as printed. Overrides given at resume may change only what does not change
what is learned (the knobs declared `resume=True` in knobs.py), recorded as a new entry of overrides.yaml,
never over the first. A finished run (train_results.json) is never trained or rewritten.
Import-light: the command-line check (preflight.py) plans a run before Hydra creates anything.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from grpo_common.errors import ConfigError
from grpo_recipes.config.knobs import may_change_on_resume
from grpo_recipes.config.values import lookup, show

# Where the run lives: the plan has already found the directory, however it was spelled.
IDENTITY = ("output_dir", "output_root", "run_name")
RUN_FILES = ("config.yaml", "metrics.jsonl", "train_results.json")


def finished_step(run_dir: Path) -> int | None:
    try:
        return int(json.loads((run_dir / "train_results.json").read_text()).get("final_eval_step"))
    except (OSError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class RunPlan:
    """new: start a run | resume: continue the unfinished run | finished: nothing to do."""

    action: str
    run_dir: Path


def plan_run(run_dir: Path, resume: bool | str, eval_only: bool = False, main: bool = True) -> RunPlan:
    """What the command does with its run directory; a ConfigError when it may not.

    `main`: rank 0. The other ranks of a launch never refuse a directory that holds a run, since rank 0 may
    already have started writing this very run into it; they follow rank 0's decision."""
    exists = run_dir.is_dir() and (
        any((run_dir / f).exists() for f in RUN_FILES) or any(run_dir.glob("checkpoint-*"))
    )
    if eval_only:
        if exists and main:
            raise ConfigError(
                f"output dir '{run_dir}' already holds a run: eval_only writes its results into a "
                f"new run_name=... (model={run_dir}/final evaluates that run's final model)"
            )
        return RunPlan("new", run_dir)
    if not exists:
        if resume is True and main:
            raise ConfigError(
                f"resume=true: there is no run in '{run_dir}' to continue. Drop resume=true to start "
                "it, or resume=auto to start it only when it is not there yet"
            )
        return RunPlan("new", run_dir)
    if resume is False:
        if not main:
            return RunPlan("new", run_dir)
        raise ConfigError(
            f"output dir '{run_dir}' already holds a run: pass resume=true to continue it, or a new "
            "run_name=... to start another"
        )
    return RunPlan("finished" if (run_dir / "train_results.json").is_file() else "resume", run_dir)


def last_checkpoint_step(run_dir: Path) -> int | None:
    """The step of the checkpoint a resume continues from: the newest whole checkpoint-<N>, the damaged ones
    after it set aside by rank 0 (outputs/checkpoints.py)."""
    from grpo_recipes.outputs.checkpoints import usable_checkpoint  # imported here: this module stays light

    checkpoint = usable_checkpoint(run_dir, int(os.environ.get("RANK", "0")) == 0)
    return int(checkpoint.name.split("-")[-1]) if checkpoint is not None else None


def check_resume_point(run_dir: Path, max_steps: int) -> None:
    """A resume continues from its newest whole checkpoint: it must still have steps to train."""
    step = last_checkpoint_step(run_dir)
    if step is not None and step >= max_steps:
        raise ConfigError(
            f"max_steps={max_steps}: '{run_dir}' continues from checkpoint-{step}, so max_steps must be "
            f"above {step}; nothing was trained or changed"
        )


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose resolved values differ between two configs (leaves, and whole added/removed keys);
    the keys that only say where the run lives (IDENTITY) are not compared."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = [k for k in list(old) + [k for k in new if k not in old] if prefix or k not in IDENTITY]
        return [
            c for k in keys for c in changed_keys(old.get(k, _MISSING), new.get(k, _MISSING), f"{prefix}{k}.")
        ]
    return [] if old == new else [prefix.rstrip(".")]


_MISSING = object()


def check_changes(run_dir: Path, saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The keys a resume changes; a ConfigError naming those that would change what the run learns."""
    changed = changed_keys(saved, now)
    refused = [k for k in changed if not may_change_on_resume(k)]
    if refused:
        shown = ", ".join(_change(saved, now, k) for k in refused[:6])
        more = f" and {len(refused) - 6} more" if len(refused) > 6 else ""
        raise ConfigError(
            f"resume of '{run_dir}': {shown}{more} would change what the run learns; a resume continues the "
            "run as it was (its config.yaml). Only max_steps, eval.* (not eval.seed), logging and saving "
            "settings may change (`python -m grpo_recipes.config` marks each): start a new run_name=... "
            "for the rest"
        )
    return changed


def _change(saved: Mapping[str, Any], now: Mapping[str, Any], dotted: str) -> str:
    (had, before), (has, after) = lookup(saved, dotted), lookup(now, dotted)
    before, after = before if had else _MISSING, after if has else _MISSING
    scalar = all(
        isinstance(v, (str, int, float, bool, type(None))) and len(str(v)) <= 40 for v in (before, after)
    )
    shown = ["unset" if v is _MISSING else show(v) for v in (before, after)]
    return f"{dotted} ({shown[0]} -> {shown[1]})" if scalar else dotted


def check_finished(run_dir: Path, max_steps: int) -> None:
    """A finished run is never changed: asking it for another step count is refused."""
    step = finished_step(run_dir)
    if step is not None and max_steps != step:
        raise ConfigError(
            f"max_steps={max_steps}: '{run_dir}' is a finished run (step {step}); a finished run is never "
            f"trained or rewritten. Start a new run_name=... (model={run_dir}/final starts from its final "
            "weights)"
        )


def finished_message(run_dir: Path) -> str:
    return (
        f"'{run_dir}' already finished at step {finished_step(run_dir)}: nothing to do, and nothing was "
        f"changed. Its results: {run_dir}/report.md; a longer run: a new run_name=... with "
        f"model={run_dir}/final"
    )


# overrides.yaml: a list of entries {overrides: [...], at: time, resume: bool}; the first entry is the
# command that started the run. Files written before entries existed hold a plain list of overrides.
def read_override_entries(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "overrides.yaml"
    if not path.is_file():
        return []
    data = OmegaConf.to_container(OmegaConf.load(path))
    if data and all(isinstance(x, str) for x in data):
        return [{"overrides": list(data), "resume": False}]
    return [dict(e) for e in data or [] if isinstance(e, dict)]


def first_overrides(run_dir: Path) -> list[str]:
    entries = read_override_entries(run_dir)
    return list(entries[0]["overrides"]) if entries else []


def merge_overrides(*lists: list[str]) -> list[str]:
    """Later overrides replace earlier ones of the same key (or group); the rest keep their order."""
    parser = OverridesParser.create()
    merged: dict[str, str] = {}
    for overrides in lists:
        for o in parser.parse_overrides(list(overrides)):
            merged[o.key_or_group] = o.input_line
    return list(merged.values())


def saved_overrides(run_dir: Path) -> list[str] | None:
    """The run's own overrides: every entry of overrides.yaml merged in order; None if it has none."""
    entries = read_override_entries(run_dir)
    return merge_overrides(*(e["overrides"] for e in entries)) if entries else None


def record_overrides(run_dir: Path, overrides: list[str], resumed: bool) -> None:
    """Append this command's overrides as a new entry (a resume records only what it adds or changes)."""
    entries = read_override_entries(run_dir)
    if resumed and entries:
        current = set(merge_overrides(*(e["overrides"] for e in entries)))
        overrides = [o for o in overrides if o not in current]
    entries.append(
        {"overrides": list(overrides), "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "resume": resumed}
    )
    tmp = run_dir / ".overrides.yaml.tmp"
    OmegaConf.save(OmegaConf.create(entries), tmp)
    tmp.replace(run_dir / "overrides.yaml")


def saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's resolved config as written when it started (config.yaml), None before it has one."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    return {**OmegaConf.to_container(OmegaConf.load(path), resolve=False), "output_dir": str(run_dir)}
