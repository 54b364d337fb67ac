"""Flows as Python generator functions: the conductor module's readable heart.

Renders a lowered `FlowPlan` (`wgc.lower.flowplan`). Each statement maps to the Python a person
would write (``for v_seg in req.inputs:``, an ``if``/``elif`` chain on ``v_seg.modality`` for
`match`, ``for _ in range(n):`` for `repeat`, ``yield RunWalk(...)`` for a walk call,
``yield Fail(...)`` and ``return`` for `fail`), each under a ``# file.walk:line`` comment.
Conditions arrive with ``placed(NODE)`` folded by lowering; what folding decided is printed as a
comment, and the rendering keeps the output clean under ruff's lint rules (nested ``if``s become
one ``and``, ``else { if }`` becomes ``elif``, match arms with the same code merge).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from wgc.codegen import pyfmt
from wgc.codegen.pyfmt import INDENT, Doc
from wgc.lower import flowplan as FP

Where = Callable[[str], str]  # plan provenance -> the comment's text

# ---------------------------------------------------------------- names


USER_PREFIX = "v_"


def py_name(name: str) -> str:
    """The Python identifier of a name the `.walk` author chose (a `for` variable): always in
    its own namespace, ``v_NAME``, which no name the generated modules define or import
    starts with, so a variable called `RunWalk`, `req`, `range` or `flow_main` shadows
    nothing (a `.walk` identifier is never a Python keyword once prefixed either)."""
    return USER_PREFIX + name


# ---------------------------------------------------------------- conditions

_PREC = {"or": 1, "and": 2, "not": 3}


def cond_py(cond: FP.Folded, outer: int = 0) -> str:
    """Python source of a folded condition."""
    if isinstance(cond, bool):
        return repr(cond)
    if isinstance(cond, FP.RequestTest):
        return f"req.{cond.pred}({pyfmt.string(cond.modality).text})"
    if isinstance(cond, FP.OptionTest):
        return f"req.option({pyfmt.string(cond.name).text})"
    if isinstance(cond, FP.OptionCompare):
        return f"req.option({pyfmt.string(cond.name).text}) {cond.op} {_value(cond.value)}"
    if isinstance(cond, FP.CountTest):
        return f"req.count({pyfmt.string(cond.modality).text}) {cond.op} {cond.value}"
    if isinstance(cond, FP.NotCond):
        text = "not " + cond_py(cond.operand, _PREC["not"])
        return f"({text})" if outer > _PREC["not"] else text
    p = _PREC[cond.op]
    text = f"{_operand(cond, cond.left, p)} {cond.op} {_operand(cond, cond.right, p + 1)}"
    return f"({text})" if outer > p else text


def _value(v: object) -> str:
    """A compared or matched option value as a Python literal."""
    assert isinstance(v, bool | int | float | str), v
    return pyfmt.flat(pyfmt.literal(v))


def _operand(parent: FP.BoolCond, child: FP.Cond, outer: int) -> str:
    # `a or (b and c)`: parentheses Python does not need but a reader does
    if parent.op == "or" and isinstance(child, FP.BoolCond) and child.op == "and":
        return f"({cond_py(child)})"
    return cond_py(child, outer)


# ---------------------------------------------------------------- count expressions


def count_py(e: FP.Count) -> str:
    """A `repeat` count in Python (options read per request)."""
    text, is_float = _count(e, 0)
    return f"int({text})" if is_float else text


def _count(e: FP.Count, outer: int) -> tuple[str, bool]:
    if isinstance(e, FP.Num):
        return pyfmt.literal(e.value).text, isinstance(e.value, float)  # type: ignore[union-attr]
    if isinstance(e, FP.OptionNum):
        return f"req.option({pyfmt.string(e.name).text})", e.is_float
    if isinstance(e, FP.NegNum):
        text, is_float = _count(e.operand, 3)
        return "-" + text, is_float
    p = 1 if e.op in "+-" else 2
    left, lf = _count(e.left, p)
    right, rf = _count(e.right, p + 1)
    is_float = lf or rf
    op = "//" if e.op == "/" and not is_float else e.op
    text = f"{left} {op} {right}"
    return (f"({text})" if outer > p else text), is_float


# ---------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class Line:
    depth: int
    text: str  # may hold continuation lines (already indented)
    comment: bool = False


class _Emitter:
    def __init__(self, where: Where) -> None:
        self.where = where
        self.lines: list[Line] = []
        self.last_where = ""

    def comment(self, depth: int, text: str) -> None:
        width = max(pyfmt.WIDTH - len(INDENT * depth) - 2, 40)  # past it the line runs long
        # the text may quote a file name: escaped, so no byte of it can end the comment
        safe = pyfmt.comment_text(text)
        for part in textwrap.wrap(safe, width, break_long_words=False) or [""]:
            self.lines.append(Line(depth, "# " + part, comment=True))

    def line(self, depth: int, text: str) -> None:
        self.lines.append(Line(depth, text))

    def doc(self, depth: int, prefix: str, doc: Doc) -> None:
        full = pyfmt.statement(prefix, doc, depth)
        self.lines.append(Line(depth, full[len(INDENT * depth) :]))

    def provenance(self, depth: int, source: str) -> None:
        where = self.where(source)
        if where != self.last_where:  # one comment per source line, not per statement on it
            self.comment(depth, where)
        self.last_where = where

    # -- blocks
    def block(self, block: tuple[FP.Stmt, ...] | None, depth: int, scope: dict[str, str]) -> None:
        start = len(self.lines)
        for s in block or ():
            self.stmt(s, depth, scope)
        if all(ln.comment for ln in self.lines[start:]):
            self.line(depth, "pass")

    def stmt(self, s: FP.Stmt, depth: int, scope: dict[str, str]) -> None:
        self.provenance(depth, s.source)
        if isinstance(s, FP.RunWalkPlan):
            self.doc(depth, "yield ", self.run_walk(s, scope))
        elif isinstance(s, FP.FailPlan):
            self.doc(depth, "yield ", pyfmt.call("Fail", [pyfmt.string(s.message)]))
            self.line(depth, "return")
        elif isinstance(s, FP.ForPlan):
            var = py_name(s.var)
            target = var if _uses_var(s.body, s.var) else "_" + var
            self.line(depth, f"for {target} in req.inputs:")
            self.block(s.body, depth + 1, {**scope, s.var: var})
        elif isinstance(s, FP.RepeatPlan):
            self.line(depth, f"for _ in range({count_py(s.count)}):")
            self.block(s.body, depth + 1, scope)
        elif isinstance(s, FP.MatchPlan):
            self.match(s, depth, scope)
        elif isinstance(s, FP.OptionMatchPlan):
            self.option_match(s, depth, scope)
        else:
            self.if_(s, depth, scope, "if")

    def run_walk(self, s: FP.RunWalkPlan, scope: dict[str, str]) -> Doc:
        pairs = [(pyfmt.string(a.param), self.arg(a, scope)) for a in s.args]
        args: list[Doc] = [pyfmt.string(s.walk)]
        if pairs:
            args.append(pyfmt.dict_(pairs))
        return pyfmt.call("RunWalk", args)

    def arg(self, a: FP.ArgPlan, scope: dict[str, str]) -> Doc:
        if a.kind == "option":
            return pyfmt.call("req.option", [pyfmt.string(a.name)])
        if a.kind == "field":
            var = scope.get(a.name, py_name(a.name))
            return pyfmt.call(f"{var}.field", [pyfmt.string(a.attr or "")])
        if a.kind == "segment":
            return pyfmt.Atom(scope.get(a.name, py_name(a.name)))
        if a.kind == "first":
            return pyfmt.call("req.first", [pyfmt.string(a.name)])
        return pyfmt.call("Persisted", [pyfmt.string(a.name)])

    # -- if / match
    def if_(self, s: FP.IfPlan, depth: int, scope: dict[str, str], keyword_: str) -> None:
        cond = s.cond
        then = s.then
        # `if a { if b { X } }` is `if a and b:` (ruff's SIM102 asks for it)
        while s.else_ is None and _only_if(then):
            inner = then[0]
            assert isinstance(inner, FP.IfPlan)
            if inner.else_ is not None:
                break
            cond = FP.and_(cond, inner.cond)
            then = inner.then
            for note in inner.notes:
                self.comment(depth, note)
        for note in s.notes:
            self.comment(depth, note)
        self.line(depth, f"{keyword_} {cond_py(cond)}:")
        self.block(then, depth + 1, scope)
        els = s.else_
        if els is None:
            return
        # `else { if ... }` is `elif` (the source's `else if`)
        if len(els) == 1 and isinstance(els[0], FP.IfPlan):
            self.if_(els[0], depth, scope, "elif")
            return
        self.line(depth, "else:")
        self.block(els, depth + 1, scope)

    def match(self, s: FP.MatchPlan, depth: int, scope: dict[str, str]) -> None:
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

    def option_match(self, s: FP.OptionMatchPlan, depth: int, scope: dict[str, str]) -> None:
        """`match option.NAME`: an ``if``/``elif`` chain on the option's value, `_` as ``else``."""
        subject = f"req.option({pyfmt.string(s.option).text})"
        first = True
        for arm in s.arms:
            if arm.default:
                if first:
                    self.block(arm.body, depth, scope)
                    return
                self.line(depth, "else:")
                self.block(arm.body, depth + 1, scope)
                return
            if not arm.values:
                continue
            values = [_value(v) for v in arm.values]
            test = (
                f"{subject} == {values[0]}"
                if len(values) == 1
                else f"{subject} in ({', '.join(values)})"
            )
            self.line(depth, f"{'if' if first else 'elif'} {test}:")
            self.block(arm.body, depth + 1, scope)
            first = False


def _only_if(block: tuple[FP.Stmt, ...]) -> bool:
    return len(block) == 1 and isinstance(block[0], FP.IfPlan)


def _stmts(block: tuple[FP.Stmt, ...]):
    """Every statement of ``block``, depth first in source order."""
    for s in block:
        yield s
        if isinstance(s, FP.ForPlan | FP.RepeatPlan):
            yield from _stmts(s.body)
        elif isinstance(s, FP.MatchPlan | FP.OptionMatchPlan):
            for a in s.arms:
                yield from _stmts(a.body)
        elif isinstance(s, FP.IfPlan):
            yield from _stmts(s.then)
            yield from _stmts(s.else_ or ())


def _uses_var(block: tuple[FP.Stmt, ...], var: str) -> bool:
    for s in _stmts(block):
        if isinstance(s, FP.MatchPlan) and s.var == var:
            return True
        if isinstance(s, FP.RunWalkPlan) and any(
            a.name == var and a.kind != "option" and a.kind != "persisted" for a in s.args
        ):
            return True
    return False


def _merge_arms(
    arms: tuple[FP.ArmPlan, ...], emitter: _Emitter, scope: dict[str, str]
) -> list[tuple[tuple[str, ...], tuple[FP.Stmt, ...]]]:
    """Adjacent arms with the same code become one (``in (...)``): ruff's SIM114 asks for it."""
    out: list[tuple[tuple[str, ...], tuple[FP.Stmt, ...]]] = []
    last_code: list[str] | None = None
    for arm in arms:
        code = _code_of(arm.body, emitter.where, scope)
        if out and "_" not in out[-1][0] and "_" not in arm.patterns and code == last_code:
            out[-1] = (out[-1][0] + tuple(p for p in arm.patterns if p not in out[-1][0]), arm.body)
        else:
            out.append((tuple(arm.patterns), arm.body))
        last_code = code
    return out


def _code_of(block: tuple[FP.Stmt, ...], where: Where, scope: dict[str, str]) -> list[str]:
    probe = _Emitter(where)
    probe.block(block, 0, scope)
    return [f"{ln.depth}:{ln.text}" for ln in probe.lines if not ln.comment]


# ---------------------------------------------------------------- whole flows


def flow_function(flow: FP.FlowPlan, where: Where) -> str:
    """``def flow_NAME(req: Request) -> FlowGen:`` with the flow's body."""
    em = _Emitter(where)
    em.block(flow.body, 1, {})
    if not any("yield" in ln.text for ln in em.lines if not ln.comment):
        em.line(1, "yield from ()")  # a flow that runs no walk is still a generator
    head = f"def flow_{flow.name}(req: Request) -> FlowGen:"
    return "\n".join([head, *(INDENT * ln.depth + ln.text for ln in em.lines)])


def when_function(flow: FP.FlowPlan) -> str:
    """``def when_NAME(req: Request) -> bool:`` for a `flow NAME when COND`."""
    assert flow.when is not None
    lines = [f"def when_{flow.name}(req: Request) -> bool:"]
    lines += [INDENT + "# " + pyfmt.comment_text(note) for note in flow.when_notes]
    lines.append(INDENT + "return " + cond_py(flow.when))
    return "\n".join(lines)
