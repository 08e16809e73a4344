"""The sandbox for model-written code: `Executor().run([Program(source), ...])`.

One process-wide executor is shared by the code tasks' verifiers and the code reward, so the
`sandbox` config group sets its limits once (`configure`).
"""

from __future__ import annotations

from rewards.sandbox.executor import DEFAULT_LANGUAGES, Executor, Program, Result

_executor: Executor | None = None


def get_executor() -> Executor:
    global _executor
    if _executor is None:
        _executor = Executor()
    return _executor


def configure(**settings) -> Executor:
    """Replace the shared executor, e.g. from the `sandbox` config group; a bad key or value is a
    ValueError naming it."""
    import dataclasses
    import difflib

    global _executor
    known = [f.name for f in dataclasses.fields(Executor)]
    for key in settings:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ValueError(f"sandbox: unknown key '{key}'.{hint} Accepted: {', '.join(known)}")
    _executor = Executor(**settings)
    return _executor


__all__ = ["DEFAULT_LANGUAGES", "Executor", "Program", "Result", "configure", "get_executor"]
