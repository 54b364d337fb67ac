"""Compile-time expressions (param values, dims, loop bounds, repeat counts) and their evaluation.

Expressions are tiny: literals, references to params, `option.NAME`, `+ - * /` and negation.
`/` is exact integer division on integers (an inexact quotient is an error, not a rounding).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span

Value = int | float | str | bool


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


def evaluate(expr: Expr, params: dict[str, Value]) -> Value:
    """Value of a static expression; raises `EvalError` with a code for anything else."""
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
        v = evaluate(expr.operand, params)
        _numeric(v, expr.operand)
        return -v  # type: ignore[operator]
    left = evaluate(expr.left, params)
    right = evaluate(expr.right, params)
    _numeric(left, expr.left)
    _numeric(right, expr.right)
    if expr.op == "+":
        return left + right  # type: ignore[operator]
    if expr.op == "-":
        return left - right  # type: ignore[operator]
    if expr.op == "*":
        return left * right  # type: ignore[operator]
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
    return left / right  # type: ignore[operator]


def _numeric(v: Value, e: Expr) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise EvalError("WG203", f"expected a number, found `{render(e)}`", e.span)


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
