"""The sandbox against hostile programs: none harms the host or the run, none scores as a pass.

Python programs are tried under both isolation levels ("full": namespaces, Landlock, dropped
capabilities where this machine allows; "basic": rlimits + the Python guard only). Shell programs
bypass the Python guard, so they prove the OS layers and run only where those layers exist.
"""

from __future__ import annotations

import os
import time

import pytest

from rewards.code import TestSuite, run_suites
from rewards.sandbox import configure
from rewards.sandbox.executor import GUARD, Executor, Program

ISOLATION = ["full", "basic"]
SUITE = TestSuite("add", (("assert candidate(1, 2) == 3", True), ("assert candidate(2, 2) == 4", True)))


@pytest.fixture(scope="module")
def executors():
    return {level: Executor(timeout=3, isolation=level) for level in ISOLATION}


def _passed(executor: Executor, solution: str) -> int:
    return run_suites([solution], [SUITE], timeout=1.0, executor=executor)[0].passed


LAYERS = Executor().layers()  # once: each call starts a sandboxed program


needs_os_layers = pytest.mark.skipif(
    not ({"net", "pid"} <= set(LAYERS.get("namespaces", [])) and LAYERS.get("landlock_abi", 0) >= 6),
    reason="this machine gives no network+PID namespaces or Landlock >= 6 to a program",
)


def test_a_correct_solution_passes_and_a_wrong_one_does_not(executors):
    for ex in executors.values():
        assert _passed(ex, "def add(a, b):\n    return a + b") == 2
        assert _passed(ex, "def add(a, b):\n    return a * b") == 1  # 2*2 == 4
        assert _passed(ex, "def add(a, b):\n    return 0") == 0


@pytest.mark.parametrize("level", ISOLATION)
def test_infinite_loop_is_killed_on_time(executors, level):
    ex = executors[level]
    start = time.monotonic()
    result = ex.run_one(Program("while True:\n    pass", timeout=1.5))
    assert result.timed_out and not result.ok
    assert time.monotonic() - start < 4
    assert _passed(ex, "def add(a, b):\n    while True:\n        pass") == 0


def _count_processes() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


@pytest.mark.parametrize("level", ISOLATION)
def test_fork_bomb_is_contained(executors, level):
    before = _count_processes()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except Exception:\n        pass"
    result = executors[level].run_one(Program(bomb, timeout=2))
    assert not result.ok
    time.sleep(0.5)
    assert _count_processes() <= before + 5  # nothing left behind
    assert _passed(executors[level], bomb + "\ndef add(a, b):\n    return a + b") == 0


@needs_os_layers
def test_shell_fork_bomb_leaves_nothing_behind():
    before = _count_processes()
    result = Executor(timeout=2).run_one(Program(":(){ :|:& };:\nsleep 5", language="bash"))
    assert not result.ok
    time.sleep(0.5)
    assert _count_processes() <= before + 5


@pytest.mark.parametrize("level", ISOLATION)
def test_huge_allocation_fails_inside_the_program(executors, level):
    result = executors[level].run_one(Program("x = bytearray(10 * 1024 ** 3)\nprint('allocated')"))
    assert not result.ok and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr
    assert _passed(executors[level], "x = bytearray(10 * 1024 ** 3)\ndef add(a, b):\n    return a + b") == 0


@pytest.mark.parametrize("level", ISOLATION)
def test_no_network(executors, level, tcp_server):
    port, hits = tcp_server
    for source in (
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')",
        f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))\nprint('connected')",
    ):
        result = executors[level].run_one(Program(source))
        assert not result.ok and "connected" not in result.stdout
    time.sleep(0.3)
    assert hits == []


@needs_os_layers
def test_no_network_for_a_shell_either(tcp_server):
    port, hits = tcp_server
    result = Executor().run_one(
        Program(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", language="bash")
    )
    assert "connected" not in result.stdout
    time.sleep(0.3)
    assert hits == []


@pytest.mark.parametrize("level", ISOLATION)
def test_cannot_write_outside_its_directory(executors, level, tmp_path):
    target = tmp_path / "pwned.txt"
    os.chmod(tmp_path, 0o777)
    result = executors[level].run_one(Program(f"open({str(target)!r}, 'w').write('x')\nprint('wrote')"))
    assert not result.ok and not target.exists()
    inside = executors[level].run_one(
        Program("open('notes.txt', 'w').write('x')\nprint(open('notes.txt').read())")
    )
    assert inside.ok and inside.stdout.strip() == "x"  # its own directory is writable


@needs_os_layers
def test_shell_cannot_write_outside_or_read_credentials(tmp_path):
    target = tmp_path / "pwned.txt"
    os.chmod(tmp_path, 0o777)
    secret_file = tmp_path / "token"
    secret_file.write_text("hf_secret_token")
    result = Executor().run_one(
        Program(f"echo x > {target}; cat {secret_file}; cat /proc/{os.getpid()}/environ", language="bash")
    )
    assert not target.exists()
    assert "hf_secret_token" not in result.stdout and "GRPO" not in result.stdout


@pytest.mark.parametrize("level", ISOLATION)
def test_environment_is_scrubbed(executors, level, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("WANDB_API_KEY", "wandb_secret_value")
    result = executors[level].run_one(Program("import os\nprint(dict(os.environ))"))
    assert result.ok
    assert "secret_value" not in result.stdout and "HF_TOKEN" not in result.stdout


@pytest.mark.parametrize("level", ISOLATION)
def test_huge_output_is_capped(level):
    ex = Executor(timeout=5, isolation=level, max_output_kb=256)
    source = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000)\nprint('done')"
    result = ex.run_one(Program(source))
    assert not result.ok and len(result.stdout) <= 256 * 1024 and "done" not in result.stdout
    assert run_suites([source + "\ndef add(a, b):\n    return a + b"], [SUITE], executor=ex)[0].passed == 0


@pytest.mark.parametrize("level", ISOLATION)
def test_killing_the_parent_harms_nothing(executors, level):
    source = (
        f"import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill({os.getpid()}, signal.SIGKILL)"
    )
    result = executors[level].run_one(Program(source))
    assert not result.ok  # and this test process is still here to check it
    assert _passed(executors[level], source + "\ndef add(a, b):\n    return a + b") == 0


@needs_os_layers
def test_shell_signals_reach_nothing_outside():
    import subprocess

    bystander = subprocess.Popen(["sleep", "30"])  # a host process the program tries to kill
    try:
        source = f"kill -9 $PPID; kill -9 {os.getpid()} {bystander.pid}; kill -9 -1; echo alive"
        result = Executor().run_one(Program(source, language="bash"))
        assert result.stdout.strip().endswith("alive")  # and this process survived to read it
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("level", ISOLATION)
def test_early_exit_and_fake_verdicts_are_not_passes(executors, level):
    ex = executors[level]
    assert _passed(ex, "import sys\nsys.exit(0)\ndef add(a, b):\n    return a + b") == 0
    assert _passed(ex, "import os\nos._exit(0)") == 0
    assert _passed(ex, "raise SystemExit(0)") == 0
    fake = "print('\\n' + '0' * 32 + ' [true, true]')\ndef add(a, b):\n    return 0"
    assert _passed(ex, fake) == 0
    # an atexit hook cannot rewrite the verdict either
    assert (
        _passed(
            ex,
            "import atexit\natexit.register(lambda: print('x [true, true]'))\ndef add(a, b):\n    return 0",
        )
        == 0
    )


def test_programs_run_in_parallel():
    ex = Executor(timeout=5, workers=2)
    programs = [Program("import time\ntime.sleep(1)")] * 4
    start = time.monotonic()
    results = ex.run(programs)
    assert all(r.ok for r in results)
    assert time.monotonic() - start < 4.0  # 4 x 1 s on 2 workers; one after another they take 4 s


def test_language_template_plugs_in_another_interpreter():
    ex = Executor(languages={"mysh": {"command": ["/bin/sh", "{file}"], "extension": ".sh"}})
    result = ex.run_one(Program("echo hello from sh", language="mysh"))
    assert result.ok and result.stdout.strip() == "hello from sh"
    suite = TestSuite(
        "double", (('[ "$(double 3)" = 6 ]', True), ('[ "$(double 5)" = 10 ]', True)), language="sh"
    )
    outcome = run_suites(["double() { echo $(( $1 * 2 )); }"], [suite], executor=ex)[0]
    assert (outcome.passed, outcome.total) == (2, 2)
    assert ex.run_one(Program("x", language="cobol")).error.startswith("unknown language 'cobol'")
    missing = Executor(languages={"q": {"command": ["q-not-installed", "{file}"]}}).run_one(
        Program("1", language="q")
    )
    assert "not found" in missing.error


def test_bad_settings_name_the_key():
    with pytest.raises(ValueError, match="unknown key 'timout'.*Did you mean: timeout"):
        configure(timout=3)
    with pytest.raises(ValueError, match="isolation must be 'full' or 'basic'"):
        Executor(isolation="none")
    with pytest.raises(ValueError, match="sandbox.memory_mb must be a positive number"):
        Executor(memory_mb=0)
    with pytest.raises(ValueError, match="sandbox.languages.q needs a 'command'"):
        Executor(languages={"q": {"extension": ".q"}})
    # an entry refines the default: another python command keeps the guard the harness relies on
    python = Executor(languages={"python": {"command": ["python3", "-I", "{file}"]}}).languages["python"]
    assert python["command"] == ["python3", "-I", "{file}"] and python["preamble"] == GUARD


FORGERIES = {  # ways a solution could try to make the harness report passes it did not earn
    "patch_exec": "import builtins\nbuiltins.exec = lambda *a, **k: None\ndef add(a, b):\n    return 0",
    "patch_compile": "import builtins\n_c = builtins.compile\n"
    "builtins.compile = lambda s, f, m, *a, **k: _c('pass', f, m)\ndef add(a, b):\n    return 0",
    "patch_json": "import json\n_d = json.dumps\njson.dumps = lambda r, *a, **k: _d([True] * len(r))\n"
    "def add(a, b):\n    return 0",
    # a library function's code, defaults or instance state patched in place (the module's dict is restored,
    # the objects it holds are not): the verdict uses no Python-level function
    "json_code": "import json\n"
    'SRC = \'def f(obj, *a, **k):\\n    return "[" + ",".join(["true"] * len(obj)) + "]"\'\n'
    "json.dumps.__code__ = [c for c in compile(SRC, 'x', 'exec').co_consts if hasattr(c, 'co_code')][0]\n"
    "def add(a, b):\n    return 0",
    "json_defaults": "import json\nclass E(json.JSONEncoder):\n    def encode(self, o):\n"
    "        return '[' + ','.join(['true'] * len(o)) + ']'\njson.dumps.__kwdefaults__['cls'] = E\n"
    "def add(a, b):\n    return 0",
    "json_encoder": "import json\n"
    "json._default_encoder.encode = lambda o: '[' + ','.join(['true'] * len(o)) + ']'\n"
    "def add(a, b):\n    return 0",
    "read_frames": "import sys, os\nf = sys._getframe(1).f_locals\n"
    "os.write(f['out'], (chr(10) + f['nonce'] + ' 11' + chr(10)).encode())\nos._exit(0)",
    "traceback_frames": "import os\ntry:\n    raise ValueError\nexcept ValueError as e:\n"
    "    f = e.__traceback__.tb_frame.f_back.f_locals\n"
    "os.write(f['out'], (chr(10) + f['nonce'] + ' 11' + chr(10)).encode())\nos._exit(0)",
    "equals_everything": "class Any:\n    def __eq__(self, other):\n        return True\n"
    "def add(a, b):\n    return Any()",
    "int_subclass": (
        "class I(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return I(0)"
    ),
    "patch_module": "import math\nmath.fsum = lambda xs: 3\ndef add(a, b):\n    return 0",
    "ignore_alarm": "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    "def add(a, b):\n    time.sleep(1.5)\n    return a + b",
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_verdicts_pass_nothing(executors, name):
    suite = TestSuite(
        "add",
        (
            ("import math\nassert candidate(1, 2) == math.fsum([1, 2])", True),
            ("assert candidate(2, 2) == 4", True),
        ),
    )
    (outcome,) = run_suites([FORGERIES[name]], [suite], timeout=1.0, executor=executors["full"])
    assert outcome.passed == 0, name


def test_the_tasks_own_helpers_cannot_be_redefined_by_the_solution():
    """HumanEval/32-style: tests call a helper from the prompt; a solution redefining it gains nothing."""
    prompt = (
        "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\n"
        "def find_zero(xs):\n    '''z'''\n"
    )
    suite = TestSuite(
        "find_zero", (("assert abs(poly([-2, 1], candidate([-2, 1]))) < 1e-6", True),), prompt=prompt
    )
    cheat = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0"
    honest = "def find_zero(xs):\n    return -xs[0] / xs[1]"
    outcomes = run_suites([cheat, honest], [suite, suite], timeout=1.0)
    assert [o.passed for o in outcomes] == [0, 1]


def _has_layer(name: str) -> bool:
    return bool(LAYERS.get(name))


def _running(marker: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            continue
    return False


@pytest.mark.skipif(not _has_layer("pids_cgroup"), reason="no pids cgroup for the sandbox on this machine")
@pytest.mark.parametrize("level", ISOLATION)
def test_processes_that_leave_the_group_are_killed_and_forks_are_capped(level):
    ex = Executor(timeout=2, isolation=level, max_processes=16)
    result = ex.run_one(
        Program("setsid sleep 31.25 &\nfor i in $(seq 40); do sleep 30 & done\nwait", language="bash")
    )
    assert (
        "fork: retry" in result.stderr or "Resource temporarily unavailable" in result.stderr
    )  # capped at 16
    time.sleep(0.3)
    assert not _running("31.25")  # escaped its process group, still killed


@pytest.mark.skipif(not _has_layer("private_filesystem"), reason="no mount namespace for the sandbox here")
def test_working_directory_has_a_disk_quota_and_tmp_is_private():
    ex = Executor(disk_mb=8)
    result = ex.run_one(
        Program("for i in range(20):\n    open(f'f{i}', 'wb').write(b'x' * 1_000_000)\nprint('wrote')")
    )
    assert not result.ok and "No space left" in result.stderr
    shadow = ex.run_one(Program("print(open('/etc/shadow').read())"))
    assert not shadow.ok and "Permission denied" in shadow.stderr


def test_shell_solutions_cannot_pass_by_exiting_early():
    suite = TestSuite(
        "double", (('[ "$(double 3)" = 6 ]', True), ('[ "$(double 5)" = 10 ]', True)), language="bash"
    )
    solutions = [
        "double() { echo $(( $1 * 2 )); }",
        "exit 0",
        'trap "exit 0" EXIT\ndouble() { echo 1; }',
        "double() { echo 6; }",
    ]
    assert [o.passed for o in run_suites(solutions, [suite] * 4)] == [2, 0, 0, 1]


def test_an_interpreter_under_tmp_still_runs(tmp_path):
    """The private /tmp hides the host's, but an interpreter (or a clone with its venv) living there
    is bound back in place: CI may clone the project under /tmp."""
    import shutil

    shutil.copy("/bin/sh", tmp_path / "mysh")
    ex = Executor(languages={"mysh": {"command": [str(tmp_path / "mysh"), "{file}"], "extension": ".sh"}})
    result = ex.run_one(Program("echo fine", language="mysh"))
    assert result.ok and result.stdout.strip() == "fine", result.stderr


@pytest.mark.parametrize("level", ISOLATION)
def test_a_program_killed_by_a_signal_is_a_failed_test_not_an_error(executors, level):
    """SIGKILL (what the OOM killer sends) and SIGSEGV end the program, not the reward: its tests fail."""
    for signum in ("SIGKILL", "SIGSEGV"):
        suicide = f"import os, signal\nos.kill(os.getpid(), signal.{signum})\n"
        assert _passed(executors[level], suicide + "def add(a, b):\n    return a + b") == 0
        assert not executors[level].run_one(Program(suicide)).ok


def test_a_cgroup_v2_that_gives_its_children_no_pids_max_is_not_used(tmp_path):
    """cgroup v2 shows a child `pids.max` only once the pids controller is on in its parent's
    `cgroup.subtree_control`; where turning it on does not take, writing the child's file is refused and
    every program failed (a lent GPU machine). Tried as a run uses it: no cgroup, programs still run."""
    from rewards.sandbox.processes import pids_cgroup_base

    base = tmp_path / "grpo-sandbox"
    base.mkdir()
    (base / "pids.max").write_text("max")
    (base / "cgroup.subtree_control").write_text("")
    assert pids_cgroup_base.__wrapped__((tmp_path,)) is None
    assert (base / "cgroup.subtree_control").read_text() == "+pids"  # it asked for the controller
    assert sorted(p.name for p in base.iterdir()) == ["cgroup.subtree_control", "pids.max"]  # probe removed
    assert pids_cgroup_base.__wrapped__((tmp_path / "none",)) is None  # no cgroup filesystem there


def test_a_sandbox_that_cannot_run_a_program_says_so_in_one_line():
    from grpo_common.errors import ConfigError

    broken = Executor(languages={"python": {"command": ["/nonexistent/python3", "{file}"]}})
    with pytest.raises(ConfigError) as err:
        broken.layers()
    assert str(err.value) == (
        "sandbox: cannot run a program on this machine: "
        "interpreter '/nonexistent/python3' for language 'python' not found on PATH"
    )
    assert Executor().layers() == LAYERS  # a working one reports its layers
