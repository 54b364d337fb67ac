"""What every part of the IR builder shares: spans, diagnostics, expressions and their values.

`wgc.ir.build` assembles the model from `DeclBuilder` (params, types, options, nodes, streams)
and `FlowBuilder` (flows and subflows), both built on `BuilderCore`.
"""

from __future__ import annotations

from typing import Any

from lark import Token

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.decls import OptionDecl
from wgc.ir.flow import MODALITIES
from wgc.ir.parse_tree import Branch, ParseTree, branch, text
from wgc.ir.types import TensorType


class BuilderCore:
    def __init__(self, file: str, overrides: dict[str, E.Value] | None = None) -> None:
        self.file = file
        self.overrides = dict(overrides or {})
        self.diags: list[Diagnostic] = []
        self.params: dict[str, E.Value] = {}
        self.failed_params: set[str] = set()  # declared, but their value was an error
        self.aliases: dict[str, ParseTree] = {}
        self.resolved_aliases: dict[str, TensorType | None] = {}
        self.options: dict[str, OptionDecl] = {}  # the first declaration of each option
        self.per_mode_names: set[str] = set()  # options whose default is `match option.X`
        self.dim_options: set[str] = set()  # options some dim reads

    # ------------------------------------------------------------------ spans
    def span(self, node: Branch) -> Span:
        if isinstance(node, Token):
            return Span(
                self.file,
                node.line or 0,
                node.column or 0,
                node.end_line or node.line or 0,
                node.end_column or (node.column or 0) + len(node),
            )
        m = node.meta
        if m.empty:
            return Span(self.file, 0, 0, 0, 0)
        return Span(self.file, m.line, m.column, m.end_line, m.end_column)

    def error(self, code: str, message: str, at: Span | Branch, **kw: Any) -> None:
        self.diags.append(
            diag(code, message, self.span(at) if not isinstance(at, Span) else at, **kw)
        )

    # ------------------------------------------------------------------ expressions
    def expr(self, t: Branch) -> E.Expr:
        if isinstance(t, Token):  # bare NAME in some positions
            return E.Ref(str(t), self.span(t))
        d = t.data
        sp = self.span(t)
        if d == "int":
            return E.Lit(E.int_literal(text(t, 0)), sp)
        if d == "float":
            return E.Lit(float(text(t, 0)), sp)
        if d == "string":
            return E.Lit(unquote(text(t, 0)), sp)
        if d == "true":
            return E.Lit(True, sp)
        if d == "false":
            return E.Lit(False, sp)
        if d == "ref":
            return E.Ref(text(t, 0), sp)
        if d == "option_ref":
            return E.OptionRef(text(t, 0), sp)
        if d == "neg":
            return E.Neg(self.expr(branch(t, 0)), sp)
        op = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[d]
        return E.BinOp(op, self.expr(branch(t, 0)), self.expr(branch(t, 1)), sp)

    def uses_failed_param(self, ex: E.Expr) -> bool:
        """Whether ``ex`` names a param whose own value failed (and was reported there)."""
        return any(r.name in self.failed_params and r.name not in self.params for r in E.refs(ex))

    def static_value(self, ex: E.Expr) -> E.Value | None:
        if self.uses_failed_param(ex):
            return None  # one error per broken param, where it is declared
        try:
            return E.evaluate(ex, self.params)
        except E.EvalError as err:
            self.error(err.code, err.message, err.span, help=err.help)
            return None

    def check_modality(self, tok: Branch) -> bool:
        m = str(tok)
        if m in MODALITIES:
            return True
        self.error(
            "WG008",
            f"unknown modality `{m}`",
            tok,
            label="not a modality",
            help=f"{did_you_mean(m, MODALITIES, end=' ')}modalities are "
            + " ".join(f"`{x}`" for x in MODALITIES),
        )
        return False

    def pattern_value(self, p: ParseTree, decl: OptionDecl) -> E.Value | None:
        """The value a pattern of `match option.NAME` (or a per-mode default) names, checked
        against option ``decl``: its kind and, when it lists them, its values (WG206)."""
        d = p.data
        tok = p.children[0] if p.children else None
        if d == "pat_name":
            self.error(
                "WG206",
                f"`{tok}` is not a value of option `{decl.name}`",
                p,
                label="a name, not a value",
                help=f'option values are literals: write `"{tok}"` for a string, or `_` for '
                "every other value",
            )
            return None
        v: E.Value
        if d == "pat_str":
            v = unquote(str(tok))
        elif d == "pat_int":
            v = E.int_literal(str(tok))
        else:
            v = d == "pat_true"
        if not fits(decl.type, v):
            self.error(
                "WG206",
                f"{literal(v)} is not a value of `{decl.type}` option `{decl.name}`",
                p,
                label=f"{a_type(kind_of(v))}, not {a_type(decl.type)}",
                labels=[Label(decl.span, "declared here")],
                help=f"compare `{decl.name}` with {a_type(decl.type)} value",
            )
            return None
        v = float(v) if decl.type == "float" else v
        if decl.choices and v not in decl.choices:
            self.error(
                "WG206",
                f"{literal(v)} is not one of the values of option `{decl.name}`",
                p,
                label="never matches",
                labels=[Label(decl.choices_span or decl.span, "its values")],
                help=f"{did_you_mean(str(v), [str(c) for c in decl.choices], end=' ')}"
                f"`{decl.name}` takes " + ", ".join(literal(c) for c in decl.choices),
            )
            return None
        return v


def a_type(type_name: str) -> str:
    """`a `bool``, `an `int``: the type name with its article, for messages."""
    return f"{'an' if type_name[0] in 'aeiou' else 'a'} `{type_name}`"


def unquote(s: str) -> str:
    """The value of a STRING token (``wgc.fmt.exprs`` decodes exactly like this)."""
    body = s[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def join(first: Span, last: Span) -> Span:
    """From the start of ``first`` to the end of ``last``."""
    return Span(first.file, first.line, first.col, last.end_line, last.end_col)


def kind_of(v: E.Value) -> str:
    """The option kind a compile-time value has: `bool`, `int`, `float` or `str`."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str"


def fits(typ: str, v: E.Value) -> bool:
    """Whether ``v`` is a value of an option of kind ``typ`` (an int fits a float)."""
    if typ == "bool" or isinstance(v, bool):
        return typ == "bool" and isinstance(v, bool)
    if typ == "int":
        return isinstance(v, int)
    if typ == "float":
        return isinstance(v, int | float)
    return typ == "str" and isinstance(v, str)


def literal(v: E.Value) -> str:
    """A value as the source would write it (`"tara"`, `4`, `true`)."""
    return E.render(E.Lit(v, Span("", 0, 0, 0, 0)))
