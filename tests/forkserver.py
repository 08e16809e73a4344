"""A Python that has imported torch, transformers, TRL and reasoning-gym once, and forks a fresh
`train_grpo.py` process per request: each end-to-end run of the test suite then skips ~8 s of imports.

The child is a new process (its own pid, process group, argv, working dir, stdout/stderr files and exit
code) that runs train_grpo.py as `python train_grpo.py ...` would: as __main__, with the repository first
on sys.path, and an uncaught exception or SystemExit leaves through the interpreter's own exit. Only
third-party libraries are imported before the fork; the project's code runs fresh in each child.
conftest.run_train uses it on a CPU for runs with the suite's base environment, and a real subprocess for
anything else (CUDA cannot be used in a child forked after it was initialised).

Protocol, on a copy of stdout (stdout itself goes to stderr, so a stray print cannot break it): "ready",
then per request line {"args", "cwd", "test", "stdout", "stderr"} -> {"pid"}, then {"returncode"} once the
child has exited (its process group is killed then: nothing a run started outlives it).
"""

import contextlib
import ctypes
import json
import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def preload() -> None:
    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import reasoning_gym  # noqa: F401
    import torch  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401


def run_child(root: str, request: dict) -> None:
    die_with_parent(signal.SIGKILL)  # a fork clears it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not the run's
    os.setpgrp()  # a timeout kills the run and whatever it started
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.chdir(request["cwd"])
    os.environ["PYTEST_CURRENT_TEST"] = request["test"]  # the one variable conftest lets differ
    script = os.path.join(root, "train_grpo.py")
    sys.argv = [script, *request["args"]]
    sys.path[0] = root  # what `python train_grpo.py` puts first
    runpy.run_path(script, run_name="__main__")
    sys.exit(0)  # the script's end: leave through the interpreter's exit (atexit handlers, flushes)


def serve(root: str) -> None:
    die_with_parent(signal.SIGTERM)  # the pytest worker died: end, and take the running child along
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    preload()
    environ = dict(os.environ)
    print("ready", file=protocol)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            protocol.close()
            run_child(root, request)  # never returns: its exit unwinds this loop in the child only
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # as the child does: whichever runs first
        print(json.dumps({"pid": pid}), file=protocol)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the run must not outlive us
            kill_group(pid)
            os.waitpid(pid, 0)
            raise
        kill_group(pid)  # anything the run started and left running
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=protocol)
        assert os.environ == environ, "the server's environment changed"


if __name__ == "__main__":
    serve(sys.argv[1])
