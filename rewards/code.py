"""The code_tests reward, and programs run against their task's test suite in the sandbox: a Python suite as
one program per solution through `_HARNESS` (its verdict on a line tagged with a nonce read from stdin); other
languages as a program per test, passing when it exits 0 in time and the language's epilogue then echoes the
nonce (README: The code sandbox)."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from grpo_common.errors import ConfigError, is_number
from rewards.accuracy import log_stats
from rewards.registry import completion_text, entries
from rewards.sandbox import get_executor
from rewards.sandbox.executor import Program

_HARNESS = r"""
def _run_tests(program, prompt, setup, entry, steps, per_test):
    # Everything the verdict depends on is bound here, before the solution runs: it may patch
    # builtins, modules or its own globals, but the tests run in a fresh namespace (pristine
    # builtins, the task's own prompt code, modules restored) and see only its function, whose
    # return values must be plain data (no object that equals everything).
    import builtins, os, signal, sys, time
    _exec, _compile, _write, _exit = exec, compile, os.write, os._exit  # builtins: C code cannot be patched
    _setitimer, _timer, _now = signal.setitimer, signal.ITIMER_REAL, time.monotonic
    _type, _all, _dict = type, all, dict
    _modules, _vars, _list = sys.modules, vars, list
    pristine = _dict(builtins.__dict__)
    # Modules loaded now are restored after the solution ran; any it loaded are dropped, so a test
    # that imports one (math, random, ...) gets a fresh copy, not one the solution patched.
    _module_type, _isinstance = type(sys), isinstance
    saved = {name: (m, _dict(_vars(m)))
             for name, m in _list(_modules.items()) if _isinstance(m, _module_type)}
    others = {name: m for name, m in _list(_modules.items()) if name not in saved}
    nonce = sys.stdin.readline().strip()
    out = os.dup(1)

    # A test's alarm raises KeyboardInterrupt: a BaseException, which `except Exception` does not swallow.
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    plain_types = (int, float, complex, str, bytes, bool, type(None))

    def plain(value, depth=0):
        t = _type(value)
        if t in plain_types:
            return True
        if depth > 50:
            return False
        if t in (list, tuple, set, frozenset):
            return _all(plain(v, depth + 1) for v in value)
        if t is dict:
            return _all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
        return False

    def checked(fn):
        def candidate(*args, **kwargs):
            value = fn(*args, **kwargs)
            if not plain(value):
                raise TypeError("sandbox: the solution returned something other than plain data")
            return value
        return candidate

    def run(seconds, env, *sources):  # True: every source ran within `seconds`
        try:
            _setitimer(_timer, seconds)
            for source, filename in sources:
                _exec(_compile(source, filename, "exec"), env)
            return True
        except BaseException:
            return False
        finally:
            _setitimer(_timer, 0)

    solution_env = {"__name__": "solution"}
    tests_env = {"__name__": "tests", "__builtins__": pristine}
    defined = run(2 * per_test, solution_env, (program, "solution.py"))
    defined = defined and (not entry or entry in solution_env)
    function = solution_env.get(entry)
    for name, (module, contents) in saved.items():  # undo what the solution did to modules
        _modules[name] = module
        current = _vars(module)
        for key in _list(current):
            if key not in contents:
                del current[key]
        current.update(contents)
    for name in _list(_modules):
        if name not in saved and name not in others:
            del _modules[name]
    _modules.update(others)
    defined = defined and run(2 * per_test, tests_env, (prompt, "prompt.py"), (setup, "tests.py"))
    if defined and entry:
        tests_env[entry] = tests_env["candidate"] = checked(function)
    results = []
    for source, counted in steps:
        start = _now()
        ok = defined and run(per_test, tests_env, (source, "tests.py"))
        ok = ok and _now() - start <= per_test * 1.5  # an ignored alarm still fails the slow test
        if counted:
            results.append(ok)
    # The verdict in builtins alone: a solution can patch any Python-level function (json.dumps's code or
    # defaults), never str's methods.
    _write(out, ("\n" + nonce + " " + "".join(["1" if r else "0" for r in results]) + "\n").encode())
    _exit(0)  # skip any atexit handler the solution registered

"""


def passed_tests(stdout: str, nonce: str, total: int) -> int:
    """How many tests the harness's nonce-tagged line says passed; 0 if it is absent or forged."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(nonce + " ")), None)
    verdict = line[len(nonce) + 1 :] if line is not None else ""
    return verdict.count("1") if len(verdict) == total and set(verdict) <= {"0", "1"} else 0


@dataclass(frozen=True)
class TestSuite:
    __test__ = False  # not a pytest class
    entry_point: str
    tests: tuple[tuple[str, bool], ...]  # (source, counted): uncounted steps are setup, run in order
    setup: str = ""
    language: str = "python"
    prompt: str = ""  # code the solution completes (HumanEval): prepended to the solution

    @classmethod
    def from_metadata(cls, metadata: Any) -> TestSuite | None:
        try:
            if isinstance(metadata, str):
                metadata = json.loads(metadata)
            if not isinstance(metadata, dict) or "tests" not in metadata:
                return None
            return cls(
                str(metadata.get("entry_point") or ""),
                tuple((str(s), bool(c)) for s, c in metadata["tests"]),
                str(metadata.get("setup") or ""),
                str(metadata.get("language") or "python"),
                str(metadata.get("code_prompt") or ""),
            )
        except (TypeError, ValueError, RecursionError):  # malformed (or nested too deep for json): no suite
            return None

    def to_metadata(self) -> dict[str, Any]:
        fields = {**asdict(self), "tests": [list(t) for t in self.tests]}
        fields["code_prompt"] = fields.pop("prompt")
        return fields

    def limited(self, max_tests: int | None) -> TestSuite:
        """At most `max_tests` counted tests, spread evenly over the suite (first, ..., last), so that
        hard-coding the first few (often the prompt's own examples) does not earn the full reward;
        every setup step before the last chosen test still runs, in order."""
        counted = [i for i, (_, is_test) in enumerate(self.tests) if is_test]
        if not max_tests or len(counted) <= max_tests:
            return self
        step = (len(counted) - 1) / max(max_tests - 1, 1)
        chosen = {counted[round(k * step)] for k in range(max_tests)}
        out = tuple(t for i, t in enumerate(self.tests) if i <= max(chosen) and (i in chosen or not t[1]))
        return replace(self, tests=out)

    @property
    def num_tests(self) -> int:
        return sum(c for _, c in self.tests)


@dataclass
class Outcome:
    passed: int
    total: int

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def assemble(solution: str, suite: TestSuite) -> str:
    """The solution after the task's prompt code, if any (a full function redefines the prompt's stub; an
    indented body completes it)."""
    if not suite.prompt:
        return solution
    whole = re.search(r"^(?:def|class|import|from) ", solution, re.MULTILINE)
    return suite.prompt + ("\n\n" if whole else "") + solution


def run_suites(solutions: Sequence[str | None], suites: Sequence[TestSuite], timeout=2.0, executor=None):
    """An Outcome per solution against its suite (None: passes nothing), the batch's programs in parallel;
    `timeout`: seconds per test."""
    executor = executor or get_executor()
    programs, owners = [], []  # owners: (solution index, "harness" or "test", nonce)
    for i, (solution, suite) in enumerate(zip(solutions, suites)):
        if solution is None or suite is None or not suite.num_tests:
            continue
        if suite.language == "python":
            nonce = secrets.token_hex(16)
            budget = timeout * (len(suite.tests) + 6) + 2.0  # start, definition, prompt + setup, every step
            args = [assemble(solution, suite), suite.prompt, suite.setup, suite.entry_point, suite.tests]
            args = json.dumps([*args, float(timeout)])
            call = f"import json as _json\n_run_tests(*_json.loads({args!r}))\n"
            programs.append(Program(_HARNESS + call, "python", nonce + "\n", budget))
            owners.append((i, "harness", nonce))
            continue
        # Without an epilogue, exit status 0 is the verdict.
        epilogue = executor.languages.get(suite.language, {}).get("epilogue")
        prelude, program = [], assemble(solution, suite)
        for source, counted in suite.tests:
            if not counted:
                prelude.append(source)
                continue
            nonce = secrets.token_hex(16) if epilogue else None
            body = "\n".join([program, suite.setup, *prelude, source, epilogue or ""])
            programs.append(Program(body, suite.language, f"{nonce}\n" if nonce else "", timeout + 2.0))
            owners.append((i, "test", nonce))
    results = executor.run(programs)
    outcomes = [Outcome(0, s.num_tests if s is not None else 0) for s in suites]
    for (i, kind, nonce), result in zip(owners, results):
        outcome = outcomes[i]
        if kind == "harness":
            outcome.passed = passed_tests(result.stdout, nonce, outcome.total)
        elif result.ok and (nonce is None or result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == nonce):
            outcome.passed += 1
    return outcomes


def code_tests(ctx, base_weight=1.0, perfect_bonus=1.0, **moved):
    """`fraction of tests passed x base_weight + perfect_bonus x 1[all passed]` (the Q recipe's reward);
    None for a row that is not a code task (TRL leaves it out of the sum). The verdicts are the tasks' own
    (ctx.judge: TaskSet.judge), so the suite is the task's choice, the same in the eval."""
    if moved:
        key = min(moved)
        raise ConfigError(
            f"dataset.rewards.code_tests.{key}: set it on the code task instead, dataset.tasks.<task>.config."
            f"{'test_timeout' if key == 'timeout' else key}, so that training and eval run the same tests"
        )
    for key, value in (("base_weight", base_weight), ("perfect_bonus", perfect_bonus)):
        if not is_number(value):
            raise ConfigError(f"dataset.rewards.code_tests.{key} must be a number, got {value!r}")

    def reward(prompts, completions, **kwargs):
        rows = entries(kwargs, len(completions))
        runnable = [i for i, r in enumerate(rows) if TestSuite.from_metadata(r.get("metadata")) is not None]
        picked = [rows[i] for i in runnable]
        judged = ctx.judge([completion_text(completions[i]) for i in runnable], picked)
        perfect = [fraction >= 1.0 for _, fraction in judged]
        scores = [f * base_weight + (perfect_bonus if ok else 0.0) for (_, f), ok in zip(judged, perfect)]
        if runnable:
            log_stats(kwargs, picked, scores, perfect, judged)
        by_row = dict(zip(runnable, scores))
        return [by_row.get(i) for i in range(len(completions))]

    return reward
