"""The processes a sandboxed program starts: a pids cgroup (where the machine gives one) that caps their
number and lists every one, and killing them all after the run, including any that left the program's
process group."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))  # cgroup v1 pids hierarchy, v2


@functools.cache
def pids_cgroup_base(roots: Sequence[Path] = CGROUP_ROOTS) -> Path | None:
    """A cgroup directory where each run gets a child with `pids.max` (root, or a delegated cgroup); None
    where none works, tried as a run uses it. Under cgroup v2 the child has `pids.max` only once the pids
    controller is enabled for the base's children: without that, writing it is refused (EACCES), and every
    program failed (seen on a lent GPU machine)."""
    for root in roots:
        base, probe = root / "grpo-sandbox", root / "grpo-sandbox" / f"probe-{os.getpid()}"
        try:
            base.mkdir(exist_ok=True)
            if not (base / "pids.max").exists() or not os.access(base, os.W_OK):
                continue
            control = base / "cgroup.subtree_control"  # v2 only
            if control.exists() and "pids" not in control.read_text().split():
                control.write_text("+pids")
            probe.mkdir(exist_ok=True)
            if (probe / "pids.max").exists():
                (probe / "pids.max").write_text("1")
                return base
        except OSError:
            pass
        finally:
            with suppress(OSError):
                probe.rmdir()
    return None


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
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    for _ in range(100):
        try:
            return cgroup.rmdir()
        except FileNotFoundError:
            return
        except OSError:  # busy until the last killed process is reaped
            time.sleep(0.01)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the program and everything it started (its session's process group), then reap."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
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
