"""Code with test cases: run a completion's program (read by the `code` prompt format) against its
tests in the sandbox, and reward it.

A code task's entry carries a test suite in its metadata (`language`, `entry_point`, `setup`,
`tests`: a list of steps, each `[source, counted]`; uncounted steps are setup run in order).
Python suites run in one program per solution through a harness that runs every test with its
own timeout, in a fresh namespace the solution cannot reach (see `code_harness.py`), and reports the
results on a line tagged with a random nonce it reads from stdin: a program that exits early
(`sys.exit(0)` before the asserts), crashes, patches the harness or prints a fake verdict passes
nothing. Other languages (a command template in the `sandbox` config) run one program per test;
a test passes when its program exits 0 in time and the language's epilogue then echoes the nonce.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpo_common.errors import ConfigError
from rewards.code_harness import parse_verdict, python_harness
from rewards.common import completion_text, entries, is_number
from rewards.sandbox import Executor, Program, get_executor
from rewards.train_stats import log_train_stats


@dataclass(frozen=True)
class TestSuite:
    __test__ = False  # not a pytest class
    entry_point: str
    tests: tuple[tuple[str, bool], ...]  # (source, counted)
    setup: str = ""
    language: str = "python"
    prompt: str = ""  # code the solution completes (HumanEval): prepended to the solution

    @classmethod
    def from_metadata(cls, metadata: Any) -> TestSuite | None:
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except (ValueError, TypeError):
                return None
        if not isinstance(metadata, dict) or "tests" not in metadata:
            return None
        try:
            return cls(
                str(metadata.get("entry_point") or ""),
                tuple((str(s), bool(c)) for s, c in metadata["tests"]),
                str(metadata.get("setup") or ""),
                str(metadata.get("language") or "python"),
                str(metadata.get("code_prompt") or ""),
            )
        except (TypeError, ValueError):
            return None

    def to_metadata(self) -> dict[str, Any]:
        return {
            "entry_point": self.entry_point,
            "tests": [list(t) for t in self.tests],
            "setup": self.setup,
            "language": self.language,
            "code_prompt": self.prompt,
        }

    def limited(self, max_tests: int | None) -> TestSuite:
        """At most `max_tests` counted tests, spread evenly over the suite (first, ..., last), so that
        hard-coding the first few (often the prompt's own examples) does not earn the full reward;
        every setup step before the last chosen test still runs, in order."""
        counted = [i for i, (_, is_test) in enumerate(self.tests) if is_test]
        if not max_tests or len(counted) <= max_tests:
            return self
        step = (len(counted) - 1) / max(max_tests - 1, 1)
        chosen = {counted[round(k * step)] for k in range(max_tests)}
        last = max(chosen)
        out = tuple(t for i, t in enumerate(self.tests) if i <= last and (i in chosen or not t[1]))
        return dataclasses.replace(self, tests=out)

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
    """The solution as a program: after the task's prompt code, if there is one (a full function
    redefines the prompt's stub; an indented body completes it)."""
    if not suite.prompt:
        return solution
    if re.search(r"^(?:def|class|import|from) ", solution, re.MULTILINE):
        return suite.prompt + "\n\n" + solution
    return suite.prompt + solution


def run_suites(
    solutions: Sequence[str | None],
    suites: Sequence[TestSuite],
    timeout: float = 2.0,
    executor: Executor | None = None,
) -> list[Outcome]:
    """Run every solution against its suite, all programs of the batch in parallel.

    `timeout`: seconds per test; a missing solution passes nothing without running.
    """
    executor = executor or get_executor()
    programs, owners, nonces = [], [], []
    for i, (solution, suite) in enumerate(zip(solutions, suites)):
        if solution is None or suite is None or not suite.num_tests:
            continue
        if suite.language == "python":
            nonce = secrets.token_hex(16)
            budget = timeout * (len(suite.tests) + 6) + 2.0  # start, definition, prompt + setup, every step
            harness = python_harness(assemble(solution, suite), suite, timeout)
            programs.append(Program(harness, "python", nonce + "\n", budget))
            owners.append((i, "harness"))
            nonces.append(nonce)
        else:
            # After the test, the language's `epilogue` echoes a nonce from stdin: a program that exits 0
            # before its test ran never prints it. Without an epilogue, exit status 0 is the verdict.
            epilogue = executor.languages.get(suite.language, {}).get("epilogue")
            prelude, program = [], assemble(solution, suite)
            for source, counted in suite.tests:
                if counted:
                    nonce = secrets.token_hex(16) if epilogue else None
                    body = "\n".join([program, suite.setup, *prelude, source, epilogue or ""])
                    programs.append(
                        Program(body, suite.language, f"{nonce}\n" if nonce else "", timeout + 2.0)
                    )
                    owners.append((i, "test"))
                    nonces.append(nonce)
                else:
                    prelude.append(source)
    results = executor.run(programs)
    outcomes = [Outcome(0, s.num_tests if s is not None else 0) for s in suites]
    for (i, kind), nonce, result in zip(owners, nonces, results):
        outcome = outcomes[i]
        if kind == "harness":
            verdict = parse_verdict(result.stdout, nonce, outcome.total)
            outcome.passed = sum(verdict) if verdict else 0
        elif result.ok and (nonce is None or result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == nonce):
            outcome.passed += 1
    return outcomes


def make_code_reward(judge, base_weight: float = 1.0, perfect_bonus: float = 1.0):
    """`fraction of tests passed x base_weight + perfect_bonus x 1[all passed]` (the Q recipe's reward);
    None for a row that is not a code task (TRL then leaves it out of the sum).

    `judge(texts, entries) -> [(Extraction, fraction passed)]` is the tasks' own verifier (TaskSet.judge):
    the suite a completion runs is chosen by its task (`max_tests`, `test_timeout`), the same for the
    eval, and each completion runs once however many rewards read its verdict."""
    for key, value in (("base_weight", base_weight), ("perfect_bonus", perfect_bonus)):
        if not is_number(value):
            raise ConfigError(f"dataset.rewards.code_tests.{key} must be a number, got {value!r}")

    def reward(prompts, completions, **kwargs):
        rows = entries(kwargs, len(completions))
        runnable = [i for i, r in enumerate(rows) if TestSuite.from_metadata(r.get("metadata")) is not None]
        judged = judge([completion_text(completions[i]) for i in runnable], [rows[i] for i in runnable])
        out: list[float | None] = [None] * len(completions)
        perfect = [fraction >= 1.0 for _, fraction in judged]
        for i, (_, fraction), all_passed in zip(runnable, judged, perfect):
            out[i] = fraction * base_weight + (perfect_bonus if all_passed else 0.0)
        # per-task accuracy (all tests pass), group variance
        if callable(kwargs.get("log_metric")) and runnable:
            log_train_stats(
                kwargs["log_metric"],
                [rows[i].get("question", "") for i in runnable],
                [rows[i].get("task", "unknown") for i in runnable],
                [out[i] for i in runnable],
                perfect,
                [extraction.answer for extraction, _ in judged],
            )
        return out

    return reward
