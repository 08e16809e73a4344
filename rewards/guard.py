"""A reward call cannot end the run (README "When things go wrong"): an exception, a call past `timeout`, the
wrong number of scores or a score that is not a finite number fails that call, whose completions score None
(TRL leaves them out). Each failure is counted in `rewards/<name>/errors` and kept in reward_errors.jsonl (the
first with its traceback and the completion that raised); the trainer reads `take()` after each step and stops
the run when a reward fails too often (grpo.reward_errors_stop_at: grpo_recipes/train/stopping.py)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
import signal
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class RewardTimeout(Exception):
    pass


def _scores(values: Any, n: int) -> tuple[list, str | None, int | None]:
    """The scores as TRL takes them (None: missing), what was wrong with them, and where."""
    try:
        values = list(values)
    except TypeError:
        return [None] * n, f"returned {type(values).__name__}, not a list of scores", None
    if len(values) != n:
        return [None] * n, f"returned {len(values)} scores for {n} completions", None
    bad = [i for i, v in enumerate(values) if not _finite(v)]
    scores = [None if i in bad or v is None else float(v) for i, v in enumerate(values)]
    if not bad:
        return scores, None, None
    return scores, f"returned {values[bad[0]]!r} for {len(bad)} of {n} completions", bad[0]


def _finite(value: Any) -> bool:
    """None, or a finite number (a numpy or 0-d torch one too); not a string that parses as one."""
    try:
        return value is None or (not isinstance(value, (str, bytes)) and math.isfinite(float(value)))
    except (TypeError, ValueError):
        return False


def _called(fn: Callable, kwargs: dict) -> Any:
    out = fn(**kwargs)
    return asyncio.run(out) if inspect.iscoroutine(out) else out  # an async reward, run to its end here


@contextlib.contextmanager
def _deadline(seconds: float):
    """RewardTimeout after `seconds` (0: none; only the main thread can take the alarm)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise RewardTimeout(f"took longer than grpo.reward_timeout={seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class RewardFaults:
    """The failed calls of a run's rewards. `path`: reward_errors.jsonl (None: kept in memory only)."""

    path: Path | None = None
    timeout: float = 0.0  # seconds a call may take (0: no limit)
    calls: Counter = field(default_factory=Counter)  # name -> training calls since the last take()
    failed: Counter = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)  # name -> its first error, in one line

    def call(self, fn: Callable, name: str, kwargs: dict[str, Any]) -> list:
        n, trace, at = len(kwargs["completions"]), None, None
        try:
            with _deadline(self.timeout):
                scores, wrong, at = _scores(_called(fn, kwargs), n)
        except Exception as err:  # noqa: BLE001 - the reward's own bug or a timeout: this call's scores are missing
            scores, wrong = [None] * n, f"{type(err).__name__}: {err}".strip()
            trace = None if isinstance(err, RewardTimeout) else traceback.format_exc()
        if kwargs.get("trainer_state") is not None:  # the stop counts training calls (the eval passes none)
            self.calls[name] += 1
            self.failed[name] += wrong is not None
        if wrong is not None:
            self._record(name, wrong, trace, fn, kwargs, at)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and name in self.first:  # from its first failure on
            log_metric(f"rewards/{name}/errors", float(wrong is not None))
        return scores

    def _record(self, name: str, error: str, trace: str | None, fn: Callable, kwargs: dict, at) -> None:
        state = kwargs.get("trainer_state")
        record = {"step": state.global_step + 1, "split": "train"} if state is not None else {"split": "eval"}
        record |= {"reward": name, "error": error.splitlines()[0]}  # never empty: it names the type at least
        if name not in self.first:  # its first failure: one line, and where and on what in the file
            self.first[name] = record["error"]
            log.warning(
                f"reward '{name}' failed ({record['error']}): that call's scores are missing, the other "
                f"rewards still count; failures are counted in rewards/{name}/errors and kept in "
                f"{self.path or 'memory'}"
            )
            at = self._culprit(fn, kwargs) if at is None and trace is not None else at
            if at is not None:
                from rewards.registry import completion_text

                record["completion"] = completion_text(kwargs["completions"][at])
            record["traceback"] = trace
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(record, default=str) + "\n")

    def _culprit(self, fn: Callable, kwargs: dict) -> int | None:
        """The first completion that raises on its own (None: only the whole batch does)."""
        n = len(kwargs["completions"])
        quiet = {key: (lambda *a, **kw: None) for key in ("log_metric", "log_extra") if key in kwargs}
        for i in range(n):
            one = {k: [v[i]] if isinstance(v, list) and len(v) == n else v for k, v in kwargs.items()}
            try:
                with _deadline(self.timeout):
                    _called(fn, {**one, **quiet})
            except Exception:  # noqa: BLE001 - any error of the user's code
                return i
        return None

    def take(self) -> dict[str, tuple[int, int]]:
        """name -> (calls, failed calls) since the last take()."""
        out = {name: (calls, self.failed[name]) for name, calls in self.calls.items()}
        self.calls, self.failed = Counter(), Counter()
        return out
