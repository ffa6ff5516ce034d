"""``calculate_output``: a multi grader's formula, evaluated by walking its syntax tree. Only
numbers, the sub-graders' names, + - * / ^ (power) and min, max, abs, floor, ceil, exp, sqrt,
log are understood (``trainer_core.spec.graders.check_formula`` refuses the rest when the grader
is parsed); there is no ``eval``."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from trainer_core.graders.errors import GraderFailed
from trainer_core.spec.graders import check_formula

BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "sqrt": math.sqrt,
    "log": math.log,
}


def evaluate(formula: str, values: dict[str, float]) -> float:
    """The formula's value; a formula that fails (1/0, sqrt(-1), a huge power) is
    ``formula_parse_error``, as OpenAI counts it."""
    try:
        tree = check_formula(formula, set(values))
        result = float(_walk(tree, values))
    except (ValueError, ArithmeticError, TypeError) as exc:
        raise GraderFailed("formula_parse_error", f"{formula!r}: {exc}") from None
    if not math.isfinite(result):
        raise GraderFailed("formula_parse_error", f"{formula!r} is {result}")
    return result


def _walk(node: ast.expr, values: dict[str, float]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return UNARY[type(node.op)](_walk(node.operand, values))
    if isinstance(node, ast.BinOp):
        left, right = _walk(node.left, values), _walk(node.right, values)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("an exponent above 64")
        return BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return FUNCTIONS[node.func.id](*(_walk(a, values) for a in node.args))
    raise ValueError(f"{ast.dump(node)} is not arithmetic")
