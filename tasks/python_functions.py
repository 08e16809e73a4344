"""`python_functions`, a code task (tasks/code.py): "Write a Python function `add_7(x)` that returns x plus
7.", a template of `TEMPLATES` with a number k and a letter c drawn, an example input shown in the question,
and `num_tests` asserts on other inputs."""

import string
from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any

from reasoning_gym.factory import register_dataset

from rewards.code import TestSuite
from tasks.code import INSTRUCTION, CodeDataset, check_suite

NAME = "python_functions"


def _int_list(rng: Random) -> list[int]:
    return [rng.randint(-9, 20) for _ in range(rng.randint(1, 6))]


def _word(rng: Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase[:8]) for _ in range(rng.randint(1, 8)))


def _an_int(lo: int, hi: int) -> Callable[[Random], int]:
    return lambda rng: rng.randint(lo, hi)


# name -> (signature, description, returned expression, argument maker); {k} / {c} are drawn per problem. The
# reference solution `def <signature>: return <expression>` is the entry's answer and computes the tests'.
TEMPLATES: dict[str, tuple[str, str, str, Callable[[Random], Any]]] = {
    "add_k": ("add_{k}(x)", "returns x plus {k}", "x + {k}", _an_int(-50, 50)),
    "times_k": ("times_{k}(x)", "returns x multiplied by {k}", "x * {k}", _an_int(-20, 20)),
    "is_multiple_of_k": (
        "is_multiple_of_{k}(n)",
        "returns True if n is divisible by {k}, else False",
        "n % {k} == 0",
        _an_int(0, 60),
    ),
    "square": ("square(x)", "returns x squared", "x * x", _an_int(-12, 12)),
    "absolute": ("absolute(x)", "returns the absolute value of x", "abs(x)", _an_int(-40, 40)),
    "list_sum": ("list_sum(xs)", "returns the sum of the numbers in the list xs", "sum(xs)", _int_list),
    "list_max": ("list_max(xs)", "returns the largest number in the non-empty list xs", "max(xs)", _int_list),
    "last_item": ("last_item(xs)", "returns the last element of the non-empty list xs", "xs[-1]", _int_list),
    "count_evens": (
        "count_evens(xs)",
        "returns how many even numbers are in the list xs",
        "sum(1 for x in xs if x % 2 == 0)",
        _int_list,
    ),
    "reverse_string": ("reverse_string(s)", "returns the string s reversed", "s[::-1]", _word),
    "repeat_k": ("repeat_{k}(s)", "returns the string s repeated {k} times", "s * {k}", _word),
    "count_char": (
        "count_{c}(s)",
        "returns how many times the letter '{c}' appears in the string s",
        "s.count('{c}')",
        _word,
    ),
    "to_upper": ("to_upper(s)", "returns the string s in upper case", "s.upper()", _word),
    "is_palindrome": (
        "is_palindrome(s)",
        "returns True if the string s reads the same backwards, else False",
        "s == s[::-1]",
        lambda rng: rng.choice([_word(rng), "aba", "abba", "c"]),
    ),
    # Two-step problems, harder than the one-liners above (the code preset's set; base rate not yet measured).
    "sum_of_digits": (
        "sum_of_digits(n)",
        "returns the sum of the decimal digits of the non-negative integer n",
        "sum(int(d) for d in str(n))",
        _an_int(0, 99999),
    ),
    "sum_evens": (
        "sum_evens(xs)",
        "returns the sum of the even numbers in the list xs",
        "sum(x for x in xs if x % 2 == 0)",
        _int_list,
    ),
    "count_greater_k": (
        "count_greater_than_{k}(xs)",
        "returns how many numbers in the list xs are greater than {k}",
        "sum(1 for x in xs if x > {k})",
        _int_list,
    ),
    "max_minus_min": (
        "max_minus_min(xs)",
        "returns the largest number in the non-empty list xs minus the smallest",
        "max(xs) - min(xs)",
        _int_list,
    ),
    "remove_char": (
        "remove_{c}(s)",
        "returns the string s with every letter '{c}' removed",
        "s.replace('{c}', '')",
        _word,
    ),
    "multiply_items_k": (
        "multiply_items_by_{k}(xs)",
        "returns a new list with every number of the list xs multiplied by {k}",
        "[x * {k} for x in xs]",
        _int_list,
    ),
    "is_sorted": (
        "is_sorted(xs)",
        "returns True if the list xs is in non-decreasing order, else False",
        "xs == sorted(xs)",
        lambda rng: rng.choice([_int_list(rng), sorted(_int_list(rng))]),
    ),
    "clamp_k": (
        "clamp_{k}(x)",
        "returns x limited to the range 0 to {k}: 0 if x is below 0, {k} if x is above {k}, else x",
        "max(0, min(x, {k}))",
        _an_int(-20, 20),
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
    task = NAME

    def __init__(self, config: PythonFunctionsConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)
        self.names = list(config.templates or TEMPLATES)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        rng = Random(self.seed + idx)
        name = rng.choice(self.names)
        signature, description, body, make_input = TEMPLATES[name]
        # k from 2..20: enough distinct functions that an eval can hold out two dozen and training keep more
        k, c = rng.randint(2, 20), rng.choice("abcdefgh")
        signature, description, body = (t.format(k=k, c=c) for t in (signature, description, body))
        entry_point = signature.split("(")[0]
        answer = f"def {signature}:\n    return {body}\n"
        namespace: dict[str, Any] = {}
        exec(answer, namespace)  # noqa: S102 - our own template, formatted with a number and a letter
        reference = namespace[entry_point]
        # The example is drawn apart from the tests and never one of them: with it among the tests, a program
        # that returns the example's output passed every test of some problems.
        example, inputs, tries = make_input(rng), [], 0
        while len(inputs) < self.config.num_tests:  # distinct inputs where the input space allows
            arg, tries = make_input(rng), tries + 1
            if tries > 20 * self.config.num_tests or (arg != example and arg not in inputs):
                inputs.append(arg)
        tests = tuple((f"assert candidate({a!r}) == {reference(a)!r}", True) for a in inputs)
        suite = TestSuite(entry_point, tests)
        output = reference(example)
        question = (
            f"Write a Python function `{signature}` that {description}.\n"
            f"Example: {entry_point}({example!r}) returns {output!r}.\n{INSTRUCTION}"
        )
        return self.entry(
            idx, question, answer, suite, template=name, example_input=example, example_output=output
        )


register_dataset(NAME, PythonFunctionsDataset, PythonFunctionsConfig)
