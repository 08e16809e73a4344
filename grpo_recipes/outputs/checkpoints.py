"""Checkpoints are whole or absent: each is written into <run_dir>/.saving, synced, and renamed into place
once every rank has written it; a resume continues from the newest one that reads back whole.
Import-light: the command-line check calls `usable_checkpoint` before Hydra (no torch, no transformers)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import zipfile
from pathlib import Path

from grpo_common.errors import ConfigError

log = logging.getLogger("grpo_recipes")
STAGING = ".saving"  # not `checkpoint-*`: nothing that looks for checkpoints sees a save in progress


class WholeCheckpoints:
    """Trainer mixin: a kill mid-save leaves only <run_dir>/.saving behind, never a partial checkpoint-N."""

    _staging: str | None = None

    def _get_output_dir(self, trial) -> str:
        return self._staging or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(super()._get_output_dir(trial))
        name, staging = f"checkpoint-{self.state.global_step}", run_dir / STAGING
        if self.args.should_save:  # a leftover of a killed save must not mix with this one
            shutil.rmtree(staging / name, ignore_errors=True)
            staging.mkdir(parents=True, exist_ok=True)
        self.accelerator.wait_for_everyone()
        self._staging = str(staging)
        try:
            super()._save_checkpoint(model, trial)  # TRL's and transformers' own, into the staging dir
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()  # every rank's shards are written (ZeRO, FSDP)
        if self.args.should_save:
            _publish(staging / name, run_dir / name)
            # transformers' rotation saw only the staging dir, and its `checkpoint-*` glob would count and
            # delete the `checkpoint-N.damaged` a resume set aside: the newest whole ones are kept. (No best
            # checkpoint to keep: TRL's eval loop is off, grpo.eval_strategy=no.)
            limit = self.args.save_total_limit
            if limit and limit > 0:
                for _, path in sorted(_checkpoints(run_dir))[:-limit]:
                    shutil.rmtree(path, ignore_errors=True)
        self.accelerator.wait_for_everyone()


def _publish(staged: Path, final: Path) -> None:
    def fsync(path):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    for root, _, files in os.walk(staged, topdown=False):  # the data on disk before the rename that shows it
        for f in [*(os.path.join(root, f) for f in files), root]:
            fsync(f)
    old = staged.parent / f"{final.name}.old"
    if final.exists():  # a rename cannot replace a directory with files: the old one moves out first
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(staged, final)
    fsync(final.parent)
    shutil.rmtree(old, ignore_errors=True)
    if not any(staged.parent.iterdir()):
        staged.parent.rmdir()


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    found = [(re.fullmatch(r"checkpoint-(\d+)", p.name), p) for p in run_dir.glob("checkpoint-*")]
    return [(int(m.group(1)), p) for m, p in found if m and p.is_dir()]


def problem(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint directory, in a few words; None when it reads back whole."""
    checkpoint = Path(checkpoint)
    try:
        step = json.loads((checkpoint / "trainer_state.json").read_text()).get("global_step")
    except OSError as err:
        return f"trainer_state.json: {'missing' if isinstance(err, FileNotFoundError) else 'unreadable'}"
    except (ValueError, AttributeError):
        return "trainer_state.json: not valid JSON, cut short?"
    if checkpoint.name != f"checkpoint-{step}":
        return f"trainer_state.json: global_step {step}, not the step of {checkpoint.name}"
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file())
    for path in files:
        try:
            why = _file_problem(path)
        except (OSError, AttributeError, TypeError) as err:  # a directory named *.json, a list for a map
            why = f"unreadable ({getattr(err, 'strerror', None) or err})"
        if why:
            return f"{path.relative_to(checkpoint).as_posix()}: {why}"
    weights = [p for p in files if "model" in p.name and p.suffix in (".safetensors", ".bin", ".pt")]
    if not weights and not any(p.is_dir() for p in checkpoint.glob("pytorch_model_fsdp*")):
        return "no model weights"
    return None


def _file_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if path.suffix == ".safetensors":  # u64 header length, JSON header, then the tensors' bytes
        with open(path, "rb") as f:
            n = struct.unpack("<Q", head)[0] if len(head := f.read(8)) == 8 else size
            try:  # a length past the end: the file is cut inside its header
                header = json.loads(f.read(n)) if 0 < n <= size - 8 else None
                ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
            except (ValueError, AttributeError, KeyError, TypeError, IndexError):
                return "unreadable header, cut short?"
        end = 8 + n + max(ends, default=0)
        return None if size == end else f"{size} bytes, its header says {end} (cut short?)"
    if path.suffix in (".pt", ".pth", ".bin"):  # torch.save writes a zip; a cut one has no central directory
        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, EOFError):
            return "not a readable archive, cut short?"
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except ValueError:
            return "not valid JSON, cut short?"
        shards = set(data.get("weight_map", {}).values()) if path.name.endswith(".index.json") else set()
        if missing := sorted(s for s in shards if not (path.parent / s).is_file()):
            return f"shard {missing[0]} is missing"
    return None


def usable_checkpoint(run_dir: Path, main: bool) -> Path | None:
    """The newest whole checkpoint-N; the damaged ones after it are set aside (renamed, never deleted) on the
    main process, the other ranks only skip them. None: the run has no checkpoint (it starts from step 0)."""
    run_dir = Path(run_dir)
    if main and (run_dir / STAGING).is_dir():
        shutil.rmtree(run_dir / STAGING, ignore_errors=True)
        log.info("removed %s: a checkpoint save that was cut short", run_dir / STAGING)
    damaged, usable = [], None
    for _, path in sorted(_checkpoints(run_dir), reverse=True):
        if (why := problem(path)) is None:
            usable = path
            break
        damaged.append((path, why, _set_aside(path) if main else path))
    if damaged and usable is None:
        listed = "; ".join(
            f"{p.name} ({why})" + (f" moved to {to.name}" if to != p else "") for p, why, to in damaged
        )
        raise ConfigError(
            f"'{run_dir}' has no usable checkpoint, every one is damaged: {listed}. resume=true again "
            "trains it from step 0, or run_name=<new> starts a new run"
        )
    for path, why, to in damaged if main else []:
        log.warning(
            "%s is damaged (%s): moved to %s; continuing from %s", path.name, why, to.name, usable.name
        )
    return usable


def _set_aside(path: Path) -> Path:
    target, n = path.with_name(f"{path.name}.damaged"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{n}")
    return path.rename(target)
