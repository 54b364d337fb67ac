"""Compile-time expressions (param values, dims, loop bounds, repeat counts) and their evaluation.

Expressions are tiny: literals, references to params, `option.NAME`, `+ - * /` and negation.
`/` is exact integer division on integers (an inexact quotient is an error, not a rounding).

Compile-time numbers are 64-bit, as the generated code and the runtime hold them: an integer lies
in [`INT_MIN`, `INT_MAX`] and a float is finite. `evaluate` checks every literal, param and
intermediate result (WG203), so a value it returns never overflows a later `int()` or `float()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span

Value = int | float | str | bool

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_INT_DIGITS = len(str(INT_MAX))  # more digits than this cannot be in range


@dataclass(frozen=True, slots=True)
class Lit:
    value: Value
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Ref:
    name: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class OptionRef:
    name: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str  # one of + - * /
    left: Expr
    right: Expr
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Expr
    span: Span = field(compare=False)


Expr = Lit | Ref | OptionRef | BinOp | Neg


class EvalError(Exception):
    """Raised by `evaluate`; carries the span of the offending sub-expression."""

    def __init__(self, code: str, message: str, span: Span, help: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.span = span
        self.help = help


def refs(expr: Expr) -> list[Ref]:
    """Every `Ref` in `expr`, left to right."""
    if isinstance(expr, Ref):
        return [expr]
    if isinstance(expr, BinOp):
        return refs(expr.left) + refs(expr.right)
    if isinstance(expr, Neg):
        return refs(expr.operand)
    return []


def option_refs(expr: Expr) -> list[OptionRef]:
    if isinstance(expr, OptionRef):
        return [expr]
    if isinstance(expr, BinOp):
        return option_refs(expr.left) + option_refs(expr.right)
    if isinstance(expr, Neg):
        return option_refs(expr.operand)
    return []


def is_static(expr: Expr, params: dict[str, Value]) -> bool:
    """True when `expr` depends only on literals and known params (no options, no symbols)."""
    if isinstance(expr, Lit):
        return True
    if isinstance(expr, Ref):
        return expr.name in params
    if isinstance(expr, OptionRef):
        return False
    if isinstance(expr, BinOp):
        return is_static(expr.left, params) and is_static(expr.right, params)
    return is_static(expr.operand, params)


def int_literal(digits: str) -> int:
    """The value of an integer literal's digits. One too long to be in range is `INT_MAX + 1`
    (`evaluate` rejects it), so no literal, however long, costs a big conversion or fails one."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= _INT_DIGITS else INT_MAX + 1


def in_range(value: Value) -> bool:
    """Whether a number is a 64-bit integer or a finite float (other values always are)."""
    if isinstance(value, bool | str):
        return True
    if isinstance(value, int):
        return INT_MIN <= value <= INT_MAX
    return math.isfinite(value)


def evaluate(expr: Expr, params: dict[str, Value]) -> Value:
    """Value of a static expression; raises `EvalError` with a code for anything else,
    including a number out of the 64-bit range anywhere in it."""
    value = _evaluate(expr, params)
    if not in_range(value):
        raise range_error(expr, value)
    return value


def range_error(expr: Expr, value: Value) -> EvalError:
    """The WG203 error for ``expr``, whose value ``value`` is not `in_range`."""
    integer = isinstance(value, int)
    what = "a 64-bit integer" if integer else "a 64-bit float"
    if isinstance(expr, Lit):
        message = f"number literal is too large for {what}"
    elif isinstance(expr, Ref):
        message = f"param `{expr.name}` is out of the range of {what}"
    else:
        message = f"`{render(expr)}` overflows {what}"
    return EvalError(
        "WG203",
        message,
        expr.span,
        help="compile-time integers are 64-bit (-2^63 to 2^63 - 1) and floats finite (at most "
        "about 1.8e308)",
    )


def _evaluate(expr: Expr, params: dict[str, Value]) -> Value:
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, Ref):
        if expr.name not in params:
            raise EvalError(
                "WG105",
                f"unknown name `{expr.name}` in a compile-time expression",
                expr.span,
                help="declare it with `param NAME = VALUE` or use a literal",
            )
        return params[expr.name]
    if isinstance(expr, OptionRef):
        raise EvalError(
            "WG203",
            f"`option.{expr.name}` is only known per request, not at compile time",
            expr.span,
            help="use a `param` for values the compiler must know",
        )
    if isinstance(expr, Neg):
        return -_number(evaluate(expr.operand, params), expr.operand)
    left = _number(evaluate(expr.left, params), expr.left)
    right = _number(evaluate(expr.right, params), expr.right)
    # in range, the operands cannot overflow Python's arithmetic: an int64 converts to a float,
    # and a float result past the range is `inf` (reported by `evaluate`), never an exception
    if expr.op == "+":
        return left + right
    if expr.op == "-":
        return left - right
    if expr.op == "*":
        return left * right
    if right == 0:
        raise EvalError("WG203", "division by zero", expr.span)
    if isinstance(left, int) and isinstance(right, int):
        if left % right:
            raise EvalError(
                "WG203",
                f"`{left} / {right}` is not an exact integer division",
                expr.span,
                help="integer expressions divide exactly; adjust the operands",
            )
        return left // right
    return left / right


def _number(v: Value, e: Expr) -> int | float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise EvalError("WG203", f"expected a number, found `{render(e)}`", e.span)
    return v


def render(expr: Expr) -> str:
    """Canonical source text of `expr` (used by `fmt` and by messages)."""
    return _render(expr, 0)


_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _render(expr: Expr, outer: int) -> str:
    if isinstance(expr, Lit):
        v = expr.value
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, OptionRef):
        return f"option.{expr.name}"
    if isinstance(expr, Neg):
        return "-" + _render(expr.operand, 3)
    p = _PREC[expr.op]
    # left-associative: the right operand needs parentheses at equal precedence
    text = f"{_render(expr.left, p)} {expr.op} {_render(expr.right, p + 1)}"
    return f"({text})" if p < outer else text
