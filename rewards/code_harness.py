"""The Python test harness, the program that runs a solution against its suite in the sandbox and reports
on a line tagged with a nonce it reads from stdin (see `_HARNESS`), and `parse_verdict`, which reads it."""

from __future__ import annotations

import json

_HARNESS = r"""
def _run_tests(program, prompt, setup, entry, steps, per_test):
    # Everything the verdict depends on is bound here, before the solution runs: it may patch
    # builtins, modules or its own globals, but the tests run in a fresh namespace (pristine
    # builtins, the task's own prompt code, modules restored) and see only its function, whose
    # return values must be plain data (no object that equals everything).
    import builtins, json, os, signal, sys, time
    _exec, _compile, _write, _exit, _dumps = exec, compile, os.write, os._exit, json.dumps
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

    class TestTimeout(BaseException):
        pass

    def alarm(signum, frame):
        raise TestTimeout()

    signal.signal(signal.SIGALRM, alarm)
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

    solution_env = {"__name__": "solution"}
    tests_env = {"__name__": "tests", "__builtins__": pristine}
    defined = False
    try:
        _setitimer(_timer, 2 * per_test)
        _exec(_compile(program, "solution.py", "exec"), solution_env)
        function = solution_env[entry] if entry else None
        defined = True
    except BaseException:
        pass
    finally:
        _setitimer(_timer, 0)
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
    if defined:
        try:
            _setitimer(_timer, 2 * per_test)
            _exec(_compile(prompt, "prompt.py", "exec"), tests_env)
            _exec(_compile(setup, "tests.py", "exec"), tests_env)
            if entry:
                tests_env[entry] = tests_env["candidate"] = checked(function)
        except BaseException:
            defined = False
        finally:
            _setitimer(_timer, 0)
    results = []
    for source, counted in steps:
        ok = False
        if defined:
            start = _now()
            try:
                _setitimer(_timer, per_test)
                _exec(_compile(source, "tests.py", "exec"), tests_env)
                ok = True
            except BaseException:
                ok = False
            finally:
                _setitimer(_timer, 0)
            ok = ok and _now() - start <= per_test * 1.5  # an ignored alarm still fails the slow test
        if counted:
            results.append(ok)
    _write(out, ("\n" + nonce + " " + _dumps(results) + "\n").encode())
    _exit(0)  # skip any atexit handler the solution registered

"""


def python_harness(program: str, suite, per_test_timeout: float) -> str:
    """The harness running `program` (the assembled solution), then the suite: per_test_timeout s a test."""
    args = [program, suite.prompt, suite.setup, suite.entry_point, suite.tests, float(per_test_timeout)]
    return _HARNESS + f"import json as _json\n_run_tests(*_json.loads({json.dumps(args)!r}))\n"


def parse_verdict(stdout: str, nonce: str, total: int) -> list[bool] | None:
    """The harness's results (one per counted test) from its nonce-tagged line; None if absent or forged."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(nonce + " ")), None)
    try:
        results = json.loads(line[len(nonce) + 1 :]) if line is not None else None
    except ValueError:
        return None
    return [bool(r) for r in results] if isinstance(results, list) and len(results) == total else None
