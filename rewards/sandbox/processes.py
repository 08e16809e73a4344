"""Bookkeeping of a sandboxed run's processes on the host side: the pids cgroup that caps and lists
them, killing every one of them at the end, counting the uid's tasks, reading their capped output."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))  # cgroup v1 pids hierarchy, v2
_cgroup_base: Path | None | bool = False  # False: not looked for yet


def pids_cgroup_base() -> Path | None:
    """A cgroup directory where each run gets a child with `pids.max` (root, or a delegated cgroup)."""
    global _cgroup_base
    if _cgroup_base is False:
        _cgroup_base = None
        for root in _CGROUP_ROOTS:
            base = root / "grpo-sandbox"
            try:
                base.mkdir(exist_ok=True)
                if (base / "pids.max").exists() and os.access(base, os.W_OK):
                    _cgroup_base = base
                    break
            except OSError:
                continue
    return _cgroup_base


def kill_cgroup(cgroup: Path) -> None:
    """Kill every process in the run's cgroup (including any that left the process group), remove it."""
    for _ in range(200):
        try:
            pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)
    for _ in range(100):
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy until the last killed process is reaped
            time.sleep(0.01)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the program and everything it started (its session's process group), then reap."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def user_tasks() -> int:
    """Processes and threads this uid runs now (RLIMIT_NPROC counts them all)."""
    uid, n = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    n += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return n


def read_capped(path: Path, limit: int) -> tuple[str, bool]:
    """The first `limit` bytes of a file as text, and whether there was more."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return "", False
    return data[:limit].decode("utf-8", "replace"), len(data) > limit
