"""The `calculator` tool: arithmetic over Python's own parser (`ast`), evaluated node by node with no
`eval`: numbers, + - * / // % **, unary signs and parentheses; names, attributes, calls and anything else
are refused, and so are results too large to be arithmetic a model needs."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from tools import ERROR_PREFIX, cut

MAX_CHARS = 200  # of an expression
MAX_BITS = 4096  # of an integer operand or result: ~1,200 digits
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class Refused(ValueError):
    pass


def _bits(x: float) -> float:
    return abs(x).bit_length() if isinstance(x, int) else math.log2(abs(x) or 1)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(left) > 1 and _bits(left) * abs(right) > MAX_BITS:
            raise Refused(f"the power {left} ** {right} is too large")
        if isinstance(node.op, ast.Mult) and _bits(left) + _bits(right) > MAX_BITS:
            raise Refused("the product is too large")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex):  # (-8) ** 0.5
            raise Refused("the result is not a real number")
        return result
    what = f"the constant {node.value!r}" if isinstance(node, ast.Constant) else type(node).__name__
    raise Refused(f"{what} is not arithmetic; use numbers, + - * / // % ** and parentheses")


def calculate(expression: str, max_output_chars: int) -> str:
    if not isinstance(expression, str) or not expression.strip():
        return f"{ERROR_PREFIX}`expression` must be a non-empty string"
    if len(expression) > MAX_CHARS:
        return f"{ERROR_PREFIX}the expression is longer than {MAX_CHARS} characters"
    try:
        value = _value(ast.parse(expression.strip(), mode="eval").body)
    except SyntaxError:
        message = "not a valid expression"
    except (Refused, ZeroDivisionError, OverflowError, ValueError) as err:
        message = str(err)
    except RecursionError:
        message = "the expression is nested too deeply"
    else:
        return cut(str(value), max_output_chars)
    return cut(ERROR_PREFIX + message, max_output_chars)


def make(max_output_chars: int) -> Callable[[str], str]:
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: Numbers with + - * / // % ** and parentheses, e.g. (12 + 7) * 3.

        Returns:
            The value, or an error.
        """
        return calculate(expression, max_output_chars)

    return calculator
