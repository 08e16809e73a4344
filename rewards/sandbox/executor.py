"""Run untrusted programs (model-written code) in parallel, each confined by `launcher.py`.

Each program gets a throw-away working directory, a scrubbed environment (no credentials or
tokens: only PATH, HOME/TMPDIR pointing into its directory, locale and thread-count settings),
its own process group and session, wall-clock, CPU, memory, file-size, process and open-file
limits, and no network. On timeout, and after every run, its whole process group is killed.
stdout and stderr go to files outside its directory and are read back capped. What kills, caps
and counts a run's processes on the host side is in `processes.py`.

The interpreter comes from a per-language command template, so any language can be plugged in by
config, e.g. `{"node": {"command": ["node", "{file}"], "extension": ".js"}}`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rewards.sandbox.guard import GUARD
from rewards.sandbox.processes import kill_cgroup, kill_group, pids_cgroup_base, read_capped, user_tasks

LAUNCHER = Path(__file__).with_name("launcher.py")
# What of /etc an interpreter needs (not all of it: /etc/shadow and friends stay unreadable).
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/alternatives",
    "/etc/mime.types",
)

# {file} is the program's path, {python} this interpreter. `preamble` is prepended to the source;
# `epilogue` (non-Python code tests) echoes stdin's first line after a test, proving the test ran.
_SH_ECHO = '[ $? -eq 0 ] && { read -r __sandbox_nonce; printf "\\n%s\\n" "$__sandbox_nonce"; }'
DEFAULT_LANGUAGES: dict[str, dict] = {
    "python": {"command": ["{python}", "-I", "-B", "{file}"], "extension": ".py", "preamble": GUARD},
    "node": {
        "command": ["node", "{file}"],
        "extension": ".js",
        "epilogue": 'process.stdout.write("\\n" + require("fs").readFileSync(0, "utf8"));',
    },
    "bash": {"command": ["/bin/bash", "{file}"], "extension": ".sh", "epilogue": _SH_ECHO},
    "sh": {"command": ["/bin/sh", "{file}"], "extension": ".sh", "epilogue": _SH_ECHO},
}


@dataclass
class Program:
    source: str
    language: str = "python"
    stdin: str = ""
    timeout: float | None = None  # seconds of wall clock; None: the executor's default


@dataclass
class Result:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration: float
    output_truncated: bool = False
    error: str | None = None  # the executor could not run it (e.g. unknown language)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    @classmethod
    def failed(cls, error: str, duration: float = 0.0) -> Result:
        """A program the executor could not run: no exit status, no output."""
        return cls(None, "", "", False, duration, error=error)


@dataclass
class Executor:
    """Runs programs in parallel, `workers` at a time (default: the cores this process may use)."""

    timeout: float = 5.0
    memory_mb: int = 1024
    max_output_kb: int = 1024
    max_processes: int = 64
    disk_mb: int = 64  # the working directory is a tmpfs of this size where a mount namespace is allowed
    workers: int | None = None
    # full: + namespaces, Landlock, dropped capabilities where the OS allows | basic: rlimits + the Python
    # guard only (for machines without them; as root it does not stop a non-Python program)
    isolation: str = "full"
    languages: Mapping[str, Mapping] = field(default_factory=dict)
    read_paths: Sequence[str] = ()

    def __post_init__(self):
        if self.isolation not in ("full", "basic"):
            raise ValueError(f"sandbox.isolation must be 'full' or 'basic', got {self.isolation!r}")
        for key in ("timeout", "memory_mb", "max_output_kb", "max_processes", "disk_mb"):
            if not isinstance(getattr(self, key), (int, float)) or getattr(self, key) <= 0:
                raise ValueError(f"sandbox.{key} must be a positive number, got {getattr(self, key)!r}")
        for name, spec in self.languages.items():
            if not isinstance(spec, Mapping) or "command" not in spec:
                raise ValueError(
                    f"sandbox.languages.{name} needs a 'command' template, e.g. [node, '{{file}}']"
                )
        self.languages = {**DEFAULT_LANGUAGES, **{k: dict(v) for k, v in self.languages.items()}}
        self.workers = self.workers or max(1, len(os.sched_getaffinity(0)))
        self._root = Path(tempfile.gettempdir()) / "grpo-sandbox"  # made (again, if cleaned) per run

    def run(self, programs: Sequence[Program]) -> list[Result]:
        if not programs:
            return []
        if len(programs) == 1 or self.workers == 1:
            return [self.run_one(p) for p in programs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(programs))) as pool:
            return list(pool.map(self.run_one, programs))

    def _command(self, language: str, file: Path) -> list[str]:
        template = self.languages[language]["command"]
        if isinstance(template, str):
            template = template.split()
        command = [str(part).format(file=file, python=sys.executable) for part in template]
        resolved = shutil.which(command[0])
        if resolved is None:
            raise FileNotFoundError(f"interpreter '{command[0]}' for language '{language}' not found on PATH")
        command[0] = os.path.abspath(resolved)
        return command

    def _read_paths(self, command: list[str]) -> list[str]:
        paths = {
            "/usr",
            "/lib",
            "/lib64",
            "/lib32",
            "/bin",
            "/sbin",
            "/opt",
            "/dev/urandom",
            "/dev/zero",
            "/dev/random",
            *ETC_FILES,
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            os.path.dirname(command[0]),
            os.path.dirname(os.path.realpath(command[0])),
            *self.read_paths,
        }
        return sorted(p for p in paths if p and os.path.exists(p))

    def layers(self) -> dict:
        """Which isolation layers this machine gives a program (namespaces, Landlock ABI, caps)."""
        if not hasattr(self, "_layers"):
            result = self.run_one(Program("true", language="bash"), report_layers=True)
            line = next((ln for ln in result.stderr.splitlines() if ln.startswith('{"sandbox_layers"')), None)
            self._layers = json.loads(line)["sandbox_layers"] if line else {}
        return self._layers

    def run_one(self, program: Program, report_layers: bool = False) -> Result:
        start = time.monotonic()
        if program.language not in self.languages:
            return Result.failed(
                f"unknown language '{program.language}'; configured: {', '.join(self.languages)}"
            )
        try:
            return self._run(program, report_layers, start)
        except OSError as err:  # no disk, no pids, a cleaned /tmp: this program fails, the run goes on
            return Result.failed(f"sandbox could not run it: {err}", time.monotonic() - start)

    def _run(self, program: Program, report_layers: bool, start: float) -> Result:
        spec = self.languages[program.language]
        timeout = float(program.timeout or self.timeout)
        self._root.mkdir(mode=0o700, exist_ok=True)
        box = Path(tempfile.mkdtemp(prefix="run-", dir=self._root))
        workdir, src, logs = box / "work", box / "src", box / "logs"
        cgroup = None
        try:
            workdir.mkdir()
            src.mkdir()
            logs.mkdir(mode=0o700)
            base = pids_cgroup_base()
            if base is not None:  # a hard cap on processes, and a list of every one to kill at the end
                cgroup = base / box.name
                cgroup.mkdir()
                (cgroup / "pids.max").write_text(str(self.max_processes))
            file = src / f"main{spec.get('extension', '')}"
            file.write_text(spec.get("preamble", "") + program.source, errors="replace")
            try:
                command = self._command(program.language, file)
            except FileNotFoundError as err:
                return Result.failed(str(err))
            max_output = self.max_output_kb * 1024
            # RLIMIT_NPROC counts the uid's existing tasks too; root is exempt (the pids cgroup caps it)
            processes = None if os.geteuid() == 0 else user_tasks() + self.max_processes
            limits = {
                "isolation": self.isolation,
                "workdir": str(workdir),
                "box": str(box),
                "cgroup": str(cgroup) if cgroup else None,
                "disk_mb": self.disk_mb,
                "read_paths": [*self._read_paths(command), str(src)],
                "cpu_s": int(timeout) + 1,
                "memory_bytes": self.memory_mb * 1024 * 1024,
                "file_bytes": max_output,
                "report_layers": report_layers,
                "processes": processes,
                "open_files": 256,
                "env": {
                    "PATH": "/usr/local/bin:/usr/bin:/bin",
                    "HOME": str(workdir),
                    "TMPDIR": str(workdir),
                    "LANG": "C.UTF-8",
                    "PYTHONDONTWRITEBYTECODE": "1",
                    "PYTHONHASHSEED": "0",
                    "OMP_NUM_THREADS": "1",
                    "OPENBLAS_NUM_THREADS": "1",
                    "MKL_NUM_THREADS": "1",
                },
            }
            launch = [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(limits), "--", *command]
            with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
                proc = subprocess.Popen(
                    launch,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    cwd=workdir,
                    env={},
                    start_new_session=True,
                    close_fds=True,
                )
                timed_out = False
                try:
                    proc.communicate(program.stdin.encode("utf-8", "replace"), timeout=timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    kill_group(proc)
                    if cgroup is not None:
                        kill_cgroup(cgroup)
            stdout, trunc_out = read_capped(logs / "stdout", max_output)
            stderr, trunc_err = read_capped(logs / "stderr", 64 * 1024)
            return Result(
                None if timed_out else proc.returncode,
                stdout,
                stderr,
                timed_out,
                time.monotonic() - start,
                trunc_out or trunc_err,
            )
        finally:
            if cgroup is not None and cgroup.exists():
                kill_cgroup(cgroup)
            shutil.rmtree(box, ignore_errors=True)
