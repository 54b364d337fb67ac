"""Flows as Python generator functions: the conductor module's readable heart.

Each statement maps to the Python a person would write (``for seg in req.inputs:``, an
``if``/``elif`` chain on ``seg.modality`` for `match`, ``for _ in range(n):`` for `repeat`,
``yield RunWalk(...)`` for a walk call, ``yield Fail(...)`` and ``return`` for `fail`), each under
a ``# file.walk:line`` comment. ``placed(NODE)`` is known at compile time: it is folded to
``True``/``False`` (a comment says which node and placement), and the condition around it is
simplified, so the output stays clean under ruff's lint rules (no ``x or True``).
"""

from __future__ import annotations

import keyword
import textwrap
from dataclasses import dataclass

from wgc.codegen import pyfmt
from wgc.codegen.pyfmt import INDENT, Doc
from wgc.ir import expr as E
from wgc.ir import flow as F

# ---------------------------------------------------------------- names


def py_name(name: str) -> str:
    """A Python identifier for a flow-level name (keywords and `req` get a trailing `_`)."""
    return name + "_" if keyword.iskeyword(name) or name == "req" else name


# ---------------------------------------------------------------- conditions


def fold(cond: F.Cond, placed: frozenset[str]) -> F.Cond | bool:
    """``cond`` with `placed(...)` and constants folded away: a bool, or a tree without them."""
    if isinstance(cond, F.Placed):
        return cond.node in placed
    if isinstance(cond, F.Const):
        return cond.value
    if isinstance(cond, F.Not):
        inner = fold(cond.operand, placed)
        return (not inner) if isinstance(inner, bool) else F.Not(inner, cond.span)
    if isinstance(cond, F.BoolOp):
        left, right = fold(cond.left, placed), fold(cond.right, placed)
        absorbing = cond.op == "or"  # True absorbs `or`, False absorbs `and`
        for side, other in ((left, right), (right, left)):
            if isinstance(side, bool):
                return absorbing if side == absorbing else other
        return F.BoolOp(cond.op, left, right, cond.span)  # type: ignore[arg-type]
    return cond


_PREC = {"or": 1, "and": 2, "not": 3}


def cond_py(cond: F.Cond | bool, outer: int = 0) -> str:
    """Python source of a folded condition."""
    if isinstance(cond, bool):
        return repr(cond)
    if isinstance(cond, F.RequestPred):
        return f"req.{cond.pred}({pyfmt.string(cond.modality).text})"
    if isinstance(cond, F.OptionCond):
        return f"req.option({pyfmt.string(cond.name).text})"
    if isinstance(cond, F.Not):
        text = "not " + cond_py(cond.operand, _PREC["not"])
        return f"({text})" if outer > _PREC["not"] else text
    if isinstance(cond, F.BoolOp):
        p = _PREC[cond.op]
        text = f"{_operand(cond, cond.left, p)} {cond.op} {_operand(cond, cond.right, p + 1)}"
        return f"({text})" if outer > p else text
    raise TypeError(f"unexpected condition {cond!r}")


def _operand(parent: F.BoolOp, child: F.Cond, outer: int) -> str:
    # `a or (b and c)`: parentheses Python does not need but a reader does
    if parent.op == "or" and isinstance(child, F.BoolOp) and child.op == "and":
        return f"({cond_py(child)})"
    return cond_py(child, outer)


def placed_note(cond: F.Cond, placed: frozenset[str], placement: str) -> str | None:
    """``placed(A): yes, placed(B): no in placement `p``` for the `placed` atoms of ``cond``."""
    atoms = [a for a in F.cond_atoms(cond) if isinstance(a, F.Placed)]
    if not atoms:
        return None
    seen = dict.fromkeys(a.node for a in atoms)
    parts = [f"placed({n}) is {n in placed}" for n in seen]
    return ", ".join(parts) + f" in placement `{placement}`"


# ---------------------------------------------------------------- count expressions


def count_py(e: E.Expr, params: dict[str, object], options: dict[str, str]) -> str:
    """A `repeat` count in Python: params folded to their values, options read per request."""
    text, is_float = _expr_py(e, params, options, 0)
    return f"int({text})" if is_float else text


def _expr_py(
    e: E.Expr, params: dict[str, object], options: dict[str, str], outer: int
) -> tuple[str, bool]:
    if isinstance(e, E.Lit):
        return pyfmt.literal(e.value).text, isinstance(e.value, float)  # type: ignore[union-attr]
    if isinstance(e, E.Ref):
        value = params.get(e.name, 0)
        return pyfmt.literal(value).text, isinstance(value, float)  # type: ignore[union-attr]
    if isinstance(e, E.OptionRef):
        return f"req.option({pyfmt.string(e.name).text})", options.get(e.name) == "float"
    if isinstance(e, E.Neg):
        text, is_float = _expr_py(e.operand, params, options, 3)
        return "-" + text, is_float
    p = 1 if e.op in "+-" else 2
    left, lf = _expr_py(e.left, params, options, p)
    right, rf = _expr_py(e.right, params, options, p + 1)
    is_float = lf or rf
    op = "//" if e.op == "/" and not is_float else e.op
    text = f"{left} {op} {right}"
    return (f"({text})" if outer > p else text), is_float


# ---------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class FlowContext:
    placed: frozenset[str]
    placement: str
    params: dict[str, object]
    options: dict[str, str]  # option name -> type


@dataclass(frozen=True, slots=True)
class Line:
    depth: int
    text: str  # may hold continuation lines (already indented)
    comment: bool = False


class _Emitter:
    def __init__(self, ctx: FlowContext) -> None:
        self.ctx = ctx
        self.lines: list[Line] = []
        self.last_where = ""

    def comment(self, depth: int, text: str) -> None:
        width = pyfmt.WIDTH - len(INDENT * depth) - 2
        for part in textwrap.wrap(text, width, break_long_words=False) or [""]:
            self.lines.append(Line(depth, "# " + part, comment=True))

    def line(self, depth: int, text: str) -> None:
        self.lines.append(Line(depth, text))

    def doc(self, depth: int, prefix: str, doc: Doc) -> None:
        full = pyfmt.statement(prefix, doc, depth)
        self.lines.append(Line(depth, full[len(INDENT * depth) :]))

    def provenance(self, depth: int, node) -> None:
        where = f"{node.span.file}:{node.span.line}"
        if where != self.last_where:  # one comment per source line, not per statement on it
            self.comment(depth, where)
        self.last_where = where

    # -- blocks
    def block(self, block: F.FBlock | None, depth: int, scope: dict[str, str]) -> None:
        start = len(self.lines)
        for s in block.stmts if block else ():
            self.stmt(s, depth, scope)
        if all(ln.comment for ln in self.lines[start:]):
            self.line(depth, "pass")

    def stmt(self, s: F.FStmt, depth: int, scope: dict[str, str]) -> None:
        if isinstance(s, F.WalkCall):
            self.provenance(depth, s)
            self.doc(depth, "yield ", self.run_walk(s, scope))
        elif isinstance(s, F.Fail):
            self.provenance(depth, s)
            self.doc(depth, "yield ", pyfmt.call("Fail", [pyfmt.string(s.message)]))
            self.line(depth, "return")
        elif isinstance(s, F.For):
            self.provenance(depth, s)
            var = py_name(s.var)
            used = _uses_var(s.body, s.var)
            target = var if used else "_" + var.lstrip("_")
            self.line(depth, f"for {target} in req.inputs:")
            self.block(s.body, depth + 1, {**scope, s.var: var})
        elif isinstance(s, F.Repeat):
            self.provenance(depth, s)
            count = count_py(s.count, self.ctx.params, self.ctx.options)
            self.line(depth, f"for _ in range({count}):")
            self.block(s.body, depth + 1, scope)
        elif isinstance(s, F.Match):
            self.provenance(depth, s)
            self.match(s, depth, scope)
        elif isinstance(s, F.If):
            self.provenance(depth, s)
            self.if_(s, depth, scope, "if")

    def run_walk(self, s: F.WalkCall, scope: dict[str, str]) -> Doc:
        pairs = [(pyfmt.string(a.param), self.arg(a, scope)) for a in s.args]
        args: list[Doc] = [pyfmt.string(s.walk)]
        if pairs:
            args.append(pyfmt.dict_(pairs))
        return pyfmt.call("RunWalk", args)

    def arg(self, a: F.FArg, scope: dict[str, str]) -> Doc:
        if a.kind is F.ArgKind.OPTION:
            return pyfmt.call("req.option", [pyfmt.string(a.name)])
        if a.kind is F.ArgKind.SEGMENT_FIELD:
            var = scope.get(a.name, py_name(a.name))
            return pyfmt.call(f"{var}.field", [pyfmt.string(a.attr or "")])
        if a.name in scope:
            return pyfmt.Atom(scope[a.name])
        return pyfmt.call("Persisted", [pyfmt.string(a.name)])

    # -- if / match
    def if_(self, s: F.If, depth: int, scope: dict[str, str], keyword_: str) -> None:
        cond: F.Cond | bool = fold(s.cond, self.ctx.placed)
        then = s.then
        # `if a { if b { X } }` is `if a and b:` (ruff's SIM102 asks for it)
        while s.else_ is None and _only_if(then):
            inner: F.If = then.stmts[0]  # type: ignore[assignment]
            if inner.else_ is not None:
                break
            inner_cond = fold(inner.cond, self.ctx.placed)
            cond = _and(cond, inner_cond, s)
            then = inner.then
            note = placed_note(inner.cond, self.ctx.placed, self.ctx.placement)
            if note:
                self.comment(depth, note)
        note = placed_note(s.cond, self.ctx.placed, self.ctx.placement)
        if note:
            self.comment(depth, note)
        self.line(depth, f"{keyword_} {cond_py(cond)}:")
        self.block(then, depth + 1, scope)
        els = s.else_
        if els is None:
            return
        # `else { if ... }` is `elif` (the source's `else if`)
        if len(els.stmts) == 1 and isinstance(els.stmts[0], F.If):
            self.if_(els.stmts[0], depth, scope, "elif")
            return
        self.line(depth, "else:")
        self.block(els, depth + 1, scope)

    def match(self, s: F.Match, depth: int, scope: dict[str, str]) -> None:
        var = scope.get(s.var, py_name(s.var))
        arms = _merge_arms(s.arms, self, scope)
        first = True
        for patterns, body in arms:
            if "_" in patterns:
                if first:  # only a default arm: no test at all
                    self.block(body, depth, scope)
                    return
                self.line(depth, "else:")
                self.block(body, depth + 1, scope)
                return
            test = (
                f"{var}.modality == {pyfmt.string(patterns[0]).text}"
                if len(patterns) == 1
                else f"{var}.modality in {pyfmt.flat(pyfmt.literal(tuple(patterns)))}"
            )
            self.line(depth, f"{'if' if first else 'elif'} {test}:")
            self.block(body, depth + 1, scope)
            first = False


def _and(left: F.Cond | bool, right: F.Cond | bool, at: F.If) -> F.Cond | bool:
    if isinstance(left, bool):
        return right if left else False
    if isinstance(right, bool):
        return left if right else False
    return F.BoolOp("and", left, right, at.span)


def _only_if(block: F.FBlock) -> bool:
    return len(block.stmts) == 1 and isinstance(block.stmts[0], F.If)


def _uses_var(block: F.FBlock, var: str) -> bool:
    for s in F.iter_fstmts(block):
        if isinstance(s, F.Match) and s.var == var:
            return True
        if isinstance(s, F.WalkCall) and any(
            a.name == var and a.kind is not F.ArgKind.OPTION for a in s.args
        ):
            return True
    return False


def _merge_arms(arms, emitter: _Emitter, scope) -> list[tuple[tuple[str, ...], F.FBlock]]:
    """Adjacent arms with the same code become one (``in (...)``): ruff's SIM114 asks for it."""
    out: list[tuple[tuple[str, ...], F.FBlock]] = []
    last_code: list[str] | None = None
    for arm in arms:
        code = _code_of(arm.body, emitter.ctx, scope)
        if out and "_" not in out[-1][0] and "_" not in arm.patterns and code == last_code:
            out[-1] = (out[-1][0] + tuple(p for p in arm.patterns if p not in out[-1][0]), arm.body)
        else:
            out.append((tuple(arm.patterns), arm.body))
        last_code = code
    return out


def _code_of(block: F.FBlock, ctx: FlowContext, scope) -> list[str]:
    probe = _Emitter(ctx)
    probe.block(block, 0, scope)
    return [f"{ln.depth}:{ln.text}" for ln in probe.lines if not ln.comment]


# ---------------------------------------------------------------- whole flows


def flow_function(flow: F.Flow, ctx: FlowContext) -> str:
    """``def flow_NAME(req: Request) -> FlowGen:`` with the flow's body."""
    em = _Emitter(ctx)
    em.block(flow.body, 1, {})
    if not any("yield" in ln.text for ln in em.lines if not ln.comment):
        em.line(1, "yield from ()")  # a flow that runs no walk is still a generator
    head = f"def flow_{flow.name}(req: Request) -> FlowGen:"
    return "\n".join([head, *(INDENT * ln.depth + ln.text for ln in em.lines)])


def when_function(flow: F.Flow, ctx: FlowContext) -> str:
    """``def when_NAME(req: Request) -> bool:`` for a `flow NAME when COND`."""
    assert flow.when is not None
    lines = [f"def when_{flow.name}(req: Request) -> bool:"]
    note = placed_note(flow.when, ctx.placed, ctx.placement)
    if note:
        lines.append(INDENT + "# " + note)
    lines.append(INDENT + "return " + cond_py(fold(flow.when, ctx.placed)))
    return "\n".join(lines)
