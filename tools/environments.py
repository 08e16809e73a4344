"""Environments, TRL's way (`GRPOTrainer(environment_factory=...)`): TRL makes one instance per rollout
(pooled, so `reset` must wipe everything), calls `reset(**row)` with the dataset row's columns before
generation (what it returns is appended to the last user message), offers each public method as a tool, and,
when the class has `get_reward()`, adds it as one more reward (weight 1, logged under the class name).
Neither environment raises: a failure comes back to the model as `error: ...`, counted as the tools' are."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from tools import ENV_TOOLS, ERROR_PREFIX

ENTRY_COLUMNS = ("question", "answer", "task", "metadata")  # what a task's verifier reads of a row


# One program: the earlier cells replayed with their output (and an exit) swallowed, then the new one.
SESSION_PROGRAM = """import contextlib as _session_c, io as _session_io
for _session_cell in {cells!r}:
    _session_sink = _session_io.StringIO()
    with _session_c.redirect_stdout(_session_sink), _session_c.redirect_stderr(_session_sink):
        try:
            exec(compile(_session_cell, "<earlier cell>", "exec"), globals())
        except SystemExit:
            pass
del _session_c, _session_io
exec(compile({code!r}, "<cell>", "exec"), globals())
"""


class PythonSession:
    """`python(code)` whose variables persist across the calls of one rollout. The sandbox runs one throw-away
    program per call, so each call replays the rollout's earlier successful cells silently, then runs the new
    one: no process outlives a call, nothing is shared between rollouts. The cost: the time limit covers the
    replay, a failed cell is not kept, and a cell that draws random numbers or reads the clock gets new
    values when replayed."""

    def __init__(self, max_output_chars: int):
        self._max_output_chars = max_output_chars
        self._cells: list[str] = []

    def reset(self, **row) -> None:
        self._cells = []

    def python(self, code: str) -> str:
        """Run Python in this conversation's session: the variables and imports of earlier calls persist.

        Args:
            code: The Python source to run; print() what you need, e.g. x = 4718295 then print(str(x)[::-1])

        Returns:
            What this code prints, or the last line of its error.
        """
        from tools.python import run_python

        if not isinstance(code, str) or not code.strip():
            return f"{ERROR_PREFIX}`code` must be a non-empty string of Python"
        ok, reply = run_python(SESSION_PROGRAM.format(cells=self._cells, code=code), self._max_output_chars)
        if ok:
            self._cells.append(code)
        return reply


class Feedback:
    """`submit(answer)`, scored by the task's verifier; a wrong answer gets "try again" while turns are left.
    `get_reward()`: 1 when the first answer is right, 1/max_turns less for each extra turn used, 0 when none
    was right."""

    def __init__(self, scorer: Callable[[str | None, Mapping[str, Any]], float], max_turns: int):
        self._scorer, self._max_turns = scorer, max_turns
        self._entry: dict[str, Any] = {}
        self._turns, self._solved_at = 0, None

    def reset(self, **row) -> str:
        """Keeps the row's task entry (TRL passes every column); returns the note appended to the question."""
        self._entry = {k: row[k] for k in ENTRY_COLUMNS if k in row}
        self._turns, self._solved_at = 0, None
        tries = "once" if self._max_turns == 1 else f"up to {self._max_turns} times"
        return f"\n\nSubmit your final answer with the submit tool; you may try {tries}."

    def submit(self, answer: str) -> str:
        """Submit your final answer to the question; you are told whether it is correct.

        Args:
            answer: The answer alone, e.g. 42

        Returns:
            Whether the answer is correct, and how many tries are left.
        """
        if self._solved_at is not None:
            return "correct: it was already accepted"
        if self._turns >= self._max_turns:
            return f"{ERROR_PREFIX}no tries left"
        if not self._entry:
            return f"{ERROR_PREFIX}no question to answer (the environment was not reset)"
        self._turns += 1
        if self._scorer(str(answer).strip(), self._entry) >= 1.0:
            self._solved_at = self._turns
            return "correct"
        left = self._max_turns - self._turns
        if left:
            return f"that is not correct, try again ({left} {'try' if left == 1 else 'tries'} left)"
        return "that is not correct; no tries left"

    def get_reward(self) -> float:
        if self._solved_at is None:
            return 0.0
        return 1.0 - (self._solved_at - 1) / self._max_turns


def make_environment_factory(
    name: str | None,
    *,
    max_output_chars: int,
    max_turns: int,
    scorer: Callable[[str | None, Mapping[str, Any]], float] | None = None,
) -> Callable[[], Any] | None:
    """TRL's `environment_factory` for `env.name` (None: no environment); `scorer` is the tasks' verifier,
    which `feedback` needs (tools/ sits below tasks/, so the caller passes it)."""
    if name is None:
        return None
    if name not in ENV_TOOLS:
        raise ValueError(f"env.name: unknown environment '{name}'; accepted: {', '.join(ENV_TOOLS)}")
    if name == "python_session":
        return functools.partial(PythonSession, max_output_chars)
    if scorer is None:
        raise ValueError("env.name=feedback needs the tasks' verifier to score answers")
    return functools.partial(Feedback, scorer, max_turns)


def environment_tools(environment: Any) -> list[Callable]:
    """The environment's methods offered as tools, by TRL's rule: every public function of its class but
    `reset` and `get_reward`, bound to the instance."""
    import inspect

    return [
        getattr(environment, name)
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def offered_tools(tools, environment_factory) -> list[Callable]:
    """Every tool the chat template shows the model, as TRL offers them: the standalone tools, then an
    environment's methods (one instance probed, as TRL does)."""
    return list(tools) + (environment_tools(environment_factory()) if environment_factory else [])
