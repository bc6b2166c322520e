"""A safe arithmetic evaluator: the calculator tool's engine. Parses with ``ast``; never runs code."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable

__all__ = ["CalculatorError", "evaluate", "format_number"]

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**30

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its value is out of range."""


def evaluate(expression: str) -> int | float:
    """Evaluate plain arithmetic: numbers, ``+ - * / // % **``, unary signs and parentheses.

    Thousands separators (``1,234``) are accepted. Names, calls, attributes and every other construct
    are refused, as are exponents above 64 and magnitudes above 1e30.

    Raises:
        CalculatorError: the expression is not plain arithmetic, divides by zero, or is out of range.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters; split it up")
    try:
        tree = ast.parse(_THOUSANDS.sub("", expression.strip()), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from exc
    return _eval(tree.body)


def format_number(value: int | float) -> str:
    """Render a result: integral values without a decimal point, others rounded to 10 significant digits."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, int) else f"{value:.10g}"


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError as exc:
            raise CalculatorError("division by zero") from exc
        except OverflowError as exc:
            raise CalculatorError("result is too large") from exc
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise CalculatorError("'^' is not a power here: write ** (e.g. 2 ** 3)")
    raise CalculatorError(f"only numbers and + - * / // % ** ( ) are allowed, not {type(node).__name__}")


def _checked(value: int | float) -> int | float:
    if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("result is out of range")
    return value
