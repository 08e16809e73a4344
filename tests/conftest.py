import collections
import functools
import inspect
import json
import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grpo_recipes.config import knobs
from grpo_recipes.config.knobs import register

register()  # the declared defaults, for the tests that compose configs with Hydra directly

ROOT = Path(__file__).resolve().parents[1]
# tests/scripted/sitecustomize.py drives a run's generate to call a tool (the tiny random model never does)
SCRIPTED_TOOL_ENV = {"SCRIPTED_TOOL_CALLS": "1", "PYTHONPATH": f"{ROOT / 'tests/scripted'}:{ROOT}"}


def _starts_runs(item) -> bool:
    """Whether a test starts training runs here (what the suite's time mostly is)."""
    source = inspect.getsource(item.function) if hasattr(item, "function") else ""
    return "gpu" not in item.keywords and ("run_train(" in source or "accelerate_launch(" in source)


def pytest_collection_modifyitems(config, items):
    """The files with the most runs first: `make test` hands whole files to its two workers in this order
    (pytest-xdist --dist loadfile --no-loadscope-reorder), so long end-to-end files start early instead of
    ending the run on one worker. `gpu` tests skip, saying why, where there is no CUDA GPU."""
    runs = collections.Counter(item.path for item in items if _starts_runs(item))
    items.sort(key=lambda item: -runs[item.path])  # stable: each file's own order is kept
    gpu_tests = [item for item in items if "gpu" in item.keywords]
    if not gpu_tests:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False): make test-gpu")
        for item in gpu_tests:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny():
    from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    return tiny_model(tokenizer, seed=0), tokenizer


BASE_ENV = {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_train(
    *overrides: str, cwd: Path = ROOT, timeout: int = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run train_grpo.py as a user would, in a new process: on a CPU, forked from the pre-imported fork
    server where the environment is the one it imported under (tests/forkserver.py;
    GRPO_TESTS_FORKSERVER=0 turns it off)."""
    env = {**os.environ, **BASE_ENV, **(env or {})}
    if ForkServer.wanted():
        server = ForkServer.get()
        if server.serves(env):
            return server.run(list(overrides), cwd, timeout)
    return subprocess.run(
        [sys.executable, str(ROOT / "train_grpo.py"), *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ForkServer:
    """One per test process, started at its first run; it ends with that process (its stdin closes, and
    it dies with its parent). Any failure retires it: a server whose replies may be out of step is never
    asked again."""

    _server: "ForkServer | None" = None

    @staticmethod
    @functools.cache
    def wanted() -> bool:
        import torch

        # CUDA cannot be used in a child forked from a process that initialised it (the preload may)
        return os.environ.get("GRPO_TESTS_FORKSERVER", "1") == "1" and not torch.cuda.is_available()

    @classmethod
    def get(cls) -> "ForkServer":
        if cls._server is None or cls._server.proc.poll() is not None:
            cls._server = cls()
        return cls._server

    def __init__(self):
        import tempfile

        self.env = {**os.environ, **BASE_ENV}
        self.log = Path(tempfile.mkdtemp(prefix="forkserver-")) / "stderr"
        with self.log.open("w") as log:  # its own warnings and a crash's traceback, not a test's capture
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "tests/forkserver.py"), str(ROOT)],
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.replies: queue.Queue[str | None] = queue.Queue()  # one reader, and None at its end
        threading.Thread(target=self._read, daemon=True).start()
        try:
            ready = self.replies.get(timeout=300)
        except queue.Empty:
            ready = None
        if ready != "ready\n":
            self.retire()
            raise RuntimeError(f"the test fork server did not start: {self.log.read_text()[-3000:]}")

    def serves(self, env: dict) -> bool:
        """Libraries read some variables once, at import (HF_HUB_OFFLINE, OMP_NUM_THREADS): a run with any
        other environment than the server's gets a real subprocess. pytest's own per-test marker aside."""
        marker = "PYTEST_CURRENT_TEST"
        return {**env, marker: None} == {**self.env, marker: None}

    def retire(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if ForkServer._server is self:
            ForkServer._server = None

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.replies.put(line)
        self.replies.put(None)

    def _reply(self, timeout: float) -> dict:
        try:
            line = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        if line is None:
            raise RuntimeError(f"the test fork server exited: {self.log.read_text()[-3000:]}")
        return json.loads(line)

    def run(self, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="forked-run-") as logs:
            out, err = Path(logs, "stdout"), Path(logs, "stderr")
            test = os.environ.get("PYTEST_CURRENT_TEST", "")
            request = {"args": args, "cwd": str(cwd), "test": test, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            try:
                self._reply(30)  # {"pid"}: the child is forked
                returncode = self._reply(timeout)["returncode"]
            except BaseException as error:  # a timeout, an interrupt, a dead server: retire it, run and all
                self.retire()  # the server's death kills the run (PR_SET_PDEATHSIG)
                if isinstance(error, TimeoutError):
                    raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text()) from None
                raise
            return subprocess.CompletedProcess(args, returncode, out.read_text(), err.read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(config: str | Path = "cpu_ddp") -> list[str]:
    """`accelerate launch` with a shipped config (its name) or a config file, on a port of its own: the two
    xdist workers may each run a two-process test at the same time, and both would otherwise listen on
    torch's default 29500."""
    config_file = config if isinstance(config, Path) else ROOT / "config" / "accelerate" / f"{config}.yaml"
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        "--main_process_port",
        str(free_port()),
        str(ROOT / "train_grpo.py"),
    ]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tiny_trainer(trainer_class, tmp_path, prompts, reward, model=None, trainer_kwargs=None, **config):
    """A GRPO trainer on the tiny random model, fp32 on the CPU, ready for `_generate_and_score_completions`
    and `compute_loss` outside the training loop."""
    from datasets import Dataset

    from grpo_recipes.config.trainer_args import RecipeGRPOConfig
    from grpo_recipes.models.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    config = {
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 12,
        "activation_checkpointing": False,
        **config,
    }
    args = RecipeGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", seed=0, **config
    )
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
    trainer = trainer_class(
        model=model if model is not None else tiny_model(tokenizer, seed=3),
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        **(trainer_kwargs or {}),
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by the train loop
    return trainer


def declared(group: str, **values) -> dict:
    """A config group as the run hands it to its consumers: every declared default, with `values` over them
    (a nested group's values merge into its defaults)."""
    cls = {**knobs.GROUPS, **knobs.OPEN_GROUPS}[group]
    out = knobs.defaults(cls)
    nested = {f"{group}.{key.split('.')[1]}" for key in knobs.KNOBS if key.count(".") == 2}
    for key, value in values.items():
        out[key] = {**out[key], **value} if f"{group}.{key}" in nested else value
    return out


@pytest.fixture
def tcp_server():
    """A listening socket on the host (the sandbox and tool tests: no network); records whether anything ever
    connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    hits, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(1)
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    stop.set()
    thread.join()
    server.close()
