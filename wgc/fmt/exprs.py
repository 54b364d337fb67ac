"""Canonical text of the parse tree's small expressions: values, types, conditions, strings.

Parentheses are printed only where the grammar needs them to rebuild the same tree (the
operators are left-associative, so a right operand of equal precedence keeps its parentheses),
and around an `and` inside an `or`, where people expect them.
Numbers keep the text they were written with; strings are re-quoted with the escapes the IR
builder decodes (`\\\\`, `\\"`, `\\n`, `\\t`), so `"\\q"` becomes `"q"` (the same string).
"""

from __future__ import annotations

from lark import Token, Tree

_BINOPS = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2)}
_UNARY = 3


def quote(token: str) -> str:
    """The canonical spelling of a STRING token (quotes included)."""
    return '"' + _escape(_unquote(token)) + '"'


def _unquote(token: str) -> str:
    # must decode exactly like wgc.ir.build._unquote, or re-quoting would change the string
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append({"n": "\n", "t": "\t"}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")


def value(t: Tree | Token) -> str:
    """A `value`: an expression, a string, `true` or `false`."""
    if isinstance(t, Tree) and t.data == "string":
        return quote(str(t.children[0]))
    return expr(t)


def expr(t: Tree | Token, outer: int = 0) -> str:
    if isinstance(t, Token):
        return str(t)
    d = t.data
    if d in _BINOPS:
        op, prec = _BINOPS[d]
        text = f"{expr(t.children[0], prec)} {op} {expr(t.children[1], prec + 1)}"
        return f"({text})" if prec < outer else text
    if d == "neg":
        operand = expr(t.children[0], _UNARY)
        # `--x` would read as one token to a person; the parentheses keep the same tree
        return f"-({operand})" if operand.startswith("-") else f"-{operand}"
    if d in ("true", "false"):
        return d
    if d == "string":
        return quote(str(t.children[0]))
    if d == "option_ref":
        return f"option.{t.children[0]}"
    return str(t.children[0])  # int, float, ref: the token as written


def type_expr(t: Tree) -> str:
    if t.data == "type_ref":
        return str(t.children[0])
    dims = [dim(d) for d in t.children[1:] if d is not None]
    return f"{t.children[0]}[{', '.join(dims)}]"


def dim(t: Tree | Token) -> str:
    if isinstance(t, Tree) and t.data == "any_dim":
        return "?"
    if isinstance(t, Tree) and t.data == "bounded_dim":
        return f"<={expr(t.children[0])}"
    return expr(t)


def cond(t: Tree, parent: str = "") -> str:
    """A condition; ``parent`` is the operator it is an operand of (`or`, `and`, `not`, `and.r`)."""
    d = t.data
    if d == "or_":
        text = f"{cond(t.children[0], 'or')} or {cond(t.children[1], 'or.r')}"
        return f"({text})" if parent in ("and", "and.r", "not", "or.r") else text
    if d == "and_":
        text = f"{cond(t.children[0], 'and')} and {cond(t.children[1], 'and.r')}"
        # `a or (b and c)`: not needed by the grammar, but people read it wrong without them
        return f"({text})" if parent in ("or", "or.r", "and.r", "not") else text
    if d == "not_":
        return f"not {cond(t.children[0], 'not')}"
    if d in ("true", "false"):
        return d
    if d == "option_cond":
        return f"option.{t.children[0]}"
    if d == "placed":
        return f"placed({t.children[0]})"
    if d == "param_cond":
        return str(t.children[0])
    if d == "param_cmp":
        name, op, v = t.children
        return f"{name} {op} {value(v)}"
    if d == "option_cmp":
        name, op, v = t.children
        return f"option.{name} {op} {value(v)}"
    if d == "request_cmp":
        obj, pred, arg, op, v = t.children
        return f"{obj}.{pred}({arg}) {op} {value(v)}"
    obj, pred, arg = t.children  # request_pred
    return f"{obj}.{pred}({arg})"


def pattern(t: Tree) -> str:
    """A match pattern: `text | image`, `"a" | "b"`, `4`, `true`, `_`."""
    return " | ".join(_pat(p) for p in t.children)


def _pat(p: Tree) -> str:
    if p.data == "pat_str":
        return quote(str(p.children[0]))
    if p.data in ("pat_true", "pat_false"):
        return p.data[4:]
    return str(p.children[0])  # a name or an integer, as written
