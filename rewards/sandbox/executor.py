"""Run untrusted programs (model-written code) in parallel, each confined by `launcher.py` (README: The
code sandbox), all its processes killed after the run; its output goes to files outside its directory, read
back capped. Any language plugs in by a command template: `{"node": {"command": ["node", "{file}"]}}`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grpo_common.errors import ConfigError
from rewards.sandbox import check_settings
from rewards.sandbox.processes import kill_cgroup, kill_group, pids_cgroup_base, user_tasks

LAUNCHER = Path(__file__).with_name("launcher.py")
# Readable by every program: system directories and what of /etc an interpreter needs (not all of it:
# /etc/shadow and friends stay unreadable).
SYSTEM_PATHS = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt", "/dev/urandom", "/dev/zero"]
SYSTEM_PATHS += ["/dev/random", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"]
SYSTEM_PATHS += ["/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/alternatives", "/etc/mime.types"]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
ENV |= {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Prepended to every Python program: an audit hook (which Python code cannot remove) refusing new processes,
# signals, sockets, ctypes and writes outside the working directory; defence in depth, not the wall (an
# in-process guard can be got around: the launcher's OS limits come first where the kernel has them).
GUARD = r"""
def _sandbox_guard():
    import os, sys
    root = os.path.realpath(os.getcwd())
    blocked = {
        "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.system", "os.exec", "os.spawn",
        "os.posix_spawn", "os.startfile", "subprocess.Popen", "pty.spawn", "socket.__new__",
        "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "ctypes.dlopen",
        "ctypes.dlsym", "ctypes.addressof", "ctypes.cdata", "os.setuid", "resource.setrlimit",
        "sys.remote_exec", "signal.pthread_kill", "sys._current_frames", "sys.settrace", "sys.setprofile",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "object.__getattr__",
    }
    # Frames would let a program read the test harness's locals. Refused with an error that is also
    # a ValueError, which the stdlib's optional frame lookups (namedtuple, typing, enum) tolerate.
    class SandboxDenied(PermissionError, ValueError):
        pass
    blocked_imports = {"_posixsubprocess", "_ctypes", "_socket", "_multiprocessing", "_xxsubinterpreters"}
    path_events = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod",
                   "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.move"}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def inside(path):
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == root or real.startswith(root + os.sep) or real == "/dev/null"

    def hook(event, args):
        swap = event == "object.__setattr__" and args[1:2] == ("__code__",)  # a function's code replaced
        if event in blocked or event == "sys._getframe" or swap:
            raise SandboxDenied("sandbox: " + event + " is not allowed")
        if event == "import" and args and args[0] in blocked_imports:
            raise SandboxDenied("sandbox: importing " + str(args[0]) + " is not allowed")
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags)
            if writing and not inside(path):
                raise PermissionError("sandbox: writing outside the working directory is not allowed")
        elif event in path_events:
            if not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
                raise PermissionError("sandbox: " + event + " outside the working directory is not allowed")

    sys.addaudithook(hook)


_sandbox_guard()
del _sandbox_guard
"""

# {file} is the program's path, {python} this interpreter. `preamble` is prepended to the source;
# `epilogue` (non-Python code tests) echoes stdin's first line after a test, proving the test ran.
_SH_ECHO = '[ $? -eq 0 ] && { read -r __sandbox_nonce; printf "\\n%s\\n" "$__sandbox_nonce"; }'
_NODE_ECHO = 'process.stdout.write("\\n" + require("fs").readFileSync(0, "utf8"));'
DEFAULT_LANGUAGES: dict[str, dict] = {
    "python": {"command": ["{python}", "-I", "-B", "{file}"], "extension": ".py", "preamble": GUARD},
    "node": {"command": ["node", "{file}"], "extension": ".js", "epilogue": _NODE_ECHO},
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
    timed_out: bool = False
    error: str | None = None  # the executor could not run it (e.g. unknown language)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None


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
        check_settings(**vars(self))
        own = {k: {**DEFAULT_LANGUAGES.get(k, {}), **v} for k, v in self.languages.items()}
        self.languages = {**DEFAULT_LANGUAGES, **own}  # an entry refines its default: python keeps GUARD
        self.workers = self.workers or max(1, len(os.sched_getaffinity(0)))
        self._root = Path(tempfile.gettempdir()) / "grpo-sandbox"  # made (again, if cleaned) per run

    def run(self, programs: Sequence[Program]) -> list[Result]:
        if len(programs) <= 1 or self.workers == 1:
            return [self.run_one(p) for p in programs]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(programs))) as pool:
            return list(pool.map(self.run_one, programs))

    def layers(self) -> dict:
        """Which isolation layers this machine gives a program (namespaces, Landlock ABI, caps). A sandbox
        that cannot run `print()` here raises ConfigError in one line: a run would otherwise score every
        program, and answer every tool call, with the same error."""
        if not hasattr(self, "_layers"):
            result = self.run_one(Program("print('ok')"), report_layers=True)
            lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip()]
            report = next((ln for ln in lines if ln.startswith('{"sandbox_layers"')), None)
            if not (result.ok and result.stdout == "ok\n"):
                other = [ln for ln in lines if ln is not report]
                reason = result.error or (other[-1] if other else f"exit code {result.returncode}")
                raise ConfigError(f"sandbox: cannot run a program on this machine: {reason}")
            self._layers = json.loads(report)["sandbox_layers"] if report else {}
        return self._layers

    def run_one(self, program: Program, report_layers: bool = False) -> Result:
        if program.language not in self.languages:
            known = ", ".join(self.languages)
            return Result(None, "", "", error=f"unknown language '{program.language}'; configured: {known}")
        try:
            return self._run(program, report_layers)
        except OSError as err:  # no disk, no pids, a cleaned /tmp: this program fails, the run goes on
            return Result(None, "", "", error=f"sandbox could not run it: {err}")

    def _run(self, program: Program, report_layers: bool) -> Result:
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
            template = spec["command"].split() if isinstance(spec["command"], str) else spec["command"]
            command = [str(part).format(file=file, python=sys.executable) for part in template]
            resolved = shutil.which(command[0])
            if resolved is None:
                missing = f"interpreter '{command[0]}' for language '{program.language}' not found on PATH"
                return Result(None, "", "", error=missing)
            command[0] = os.path.abspath(resolved)
            paths = {*SYSTEM_PATHS, sys.prefix, sys.base_prefix, sys.exec_prefix, *self.read_paths}
            paths |= {os.path.dirname(command[0]), os.path.dirname(os.path.realpath(command[0]))}
            max_output = self.max_output_kb * 1024
            limits = {
                "isolation": self.isolation,
                "workdir": str(workdir),
                "box": str(box),
                "cgroup": str(cgroup) if cgroup else None,
                "disk_mb": self.disk_mb,
                "read_paths": [*sorted(p for p in paths if p and os.path.exists(p)), str(src)],
                "cpu_s": int(timeout) + 1,
                "memory_bytes": self.memory_mb * 1024 * 1024,
                "file_bytes": max_output,
                "report_layers": report_layers,
                # RLIMIT_NPROC counts the uid's existing tasks too; root is exempt (the pids cgroup caps it)
                "processes": None if os.geteuid() == 0 else user_tasks() + self.max_processes,
                "open_files": 256,
                "env": {**ENV, "HOME": str(workdir), "TMPDIR": str(workdir)},
            }
            launch = [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(limits), "--", *command]
            with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
                io = {"stdin": subprocess.PIPE, "stdout": out, "stderr": err}
                proc = subprocess.Popen(launch, **io, cwd=workdir, env={}, start_new_session=True)
                timed_out = False
                try:
                    proc.communicate(program.stdin.encode("utf-8", "replace"), timeout=timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    kill_group(proc)
                    if cgroup is not None:
                        kill_cgroup(cgroup)
            stdout, stderr = read_capped(logs / "stdout", max_output), read_capped(logs / "stderr", 64 * 1024)
            return Result(None if timed_out else proc.returncode, stdout, stderr, timed_out)
        finally:
            if cgroup is not None and cgroup.exists():
                kill_cgroup(cgroup)
            shutil.rmtree(box, ignore_errors=True)


def read_capped(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""
