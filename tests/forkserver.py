"""A Python that has imported torch, transformers, TRL and reasoning-gym once, and forks a fresh
`train_grpo.py` process per request: each end-to-end run of the test suite then skips ~8 s of imports.

The child is a new process (its own pid, process group, argv, working dir, stdout/stderr files and exit
code) that runs train_grpo.py as `python train_grpo.py ...` would: as __main__, with the repository first
on sys.path. It leaves as the interpreter would (exit code, traceback, non-daemon threads joined, atexit
handlers, streams flushed) but without tearing down the forked copy of the preloaded libraries, which cost
~2 s a run (leave()). Only third-party libraries are imported before the fork; the project's code runs
fresh in each child.
conftest.run_train uses it on a CPU for runs with the suite's base environment, and a real subprocess for
anything else (CUDA cannot be used in a child forked after it was initialised).

Protocol, on a copy of stdout (stdout itself goes to stderr, so a stray print cannot break it): "ready",
then per request line {"args", "cwd", "test", "stdout", "stderr"} -> {"pid"}, then {"returncode"} once the
child has exited (its process group is killed then: nothing a run started outlives it).
"""

import atexit
import contextlib
import ctypes
import json
import os
import runpy
import signal
import sys
import threading
import traceback

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def preload() -> None:
    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")  # the report's plots, at every run's end (grpo_recipes/outputs/plots.py)
    import matplotlib.pyplot
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
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:  # the interpreter's rules: None is 0, an int is itself, else print it, 1
        code = 0 if stop.code is None else stop.code
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # the interpreter prints it and dies by SIGINT
        traceback.print_exc()
        leave(0, die_by=signal.SIGINT)
    except Exception:  # noqa: BLE001  (any error: printed as the interpreter would, exit code 1)
        sys.excepthook(*sys.exc_info())
        code = 1
    leave(code)


def leave(code: int, die_by: int | None = None) -> None:
    """Exit as the interpreter's shutdown would, as far as a run can tell: non-daemon threads joined,
    atexit handlers run (logging's flush, multiprocessing's clean-up), streams flushed. Then os._exit,
    skipping the teardown of every module and object: in a forked child it copies each page of the
    preloaded libraries it touches (copy-on-write), ~2 s a run, where a run's own work before a config
    mistake takes ~0.3 s. (atexit has no public way to run its handlers early; _run_exitfuncs is the one
    the interpreter calls.)"""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if die_by is not None:  # as the interpreter does after an uncaught KeyboardInterrupt
        signal.signal(die_by, signal.SIG_DFL)
        os.kill(os.getpid(), die_by)
    os._exit(code & 0xFF)


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
