"""A Python that has imported torch, transformers, TRL and reasoning-gym once, and forks a fresh
`train_grpo.py` process per request: each end-to-end run of the test suite then skips ~8 s of imports.

The child is a new process (its own pid, argv, working dir, stdout/stderr files and exit code) that runs
train_grpo.py as `python train_grpo.py ...` would: as __main__, with the repository first on sys.path, and
an uncaught exception or SystemExit leaves through the interpreter's own exit. Only third-party libraries
are imported before the fork; the project's code runs fresh in each child. conftest.run_train uses it for
runs with the suite's base environment, and a real subprocess for anything else.

Protocol (stdin/stdout, one JSON line each): {"args", "cwd", "env", "stdout", "stderr"} -> {"pid"}, then
{"returncode"} when the child has exited.
"""

import json
import os
import runpy
import sys


def preload() -> None:
    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import reasoning_gym  # noqa: F401
    import torch  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401


def run_child(root: str, request: dict) -> None:
    os.setpgrp()  # a timeout kills the run and whatever it started
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])  # the same variables the server imported under (conftest checks)
    script = os.path.join(root, "train_grpo.py")
    sys.argv = [script, *request["args"]]
    sys.path[0] = root  # what `python train_grpo.py` puts first
    runpy.run_path(script, run_name="__main__")
    sys.exit(0)  # the script's end: leave through the interpreter's exit (atexit handlers, flushes)


def serve(root: str) -> None:
    preload()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_child(root, request)  # never returns: its exit unwinds this loop in the child only
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1])
