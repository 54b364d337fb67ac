"""Flows, lowered: each flow of the model as plain records that codegen renders into a generator.

What lowering settles here, so codegen reads the plan alone: ``placed(NODE)`` is known once the
placement is, so it is folded to a constant and the condition around it simplified (each folded
atom leaves a note, which codegen prints as a comment); a `repeat` count has its params replaced
by their effective values and remembers which operands are floats; a bare name in a walk
argument is resolved to the enclosing `for` variable (the segment) or to a channel persisted
earlier. Provenance is ``file.walk:line``, as on every plan record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wgc.diagnostics.diagnostic import Span
from wgc.ir import expr as E
from wgc.ir import flow as F
from wgc.ir.paths import compare
from wgc_runtime.contract.conductor import SegmentSpec
from wgc_runtime.contract.kinds import FlowKind

# ---------------------------------------------------------------- conditions


@dataclass(frozen=True, slots=True)
class RequestTest:
    """``request.wants(m)`` (``pred`` "wants") or ``request.has(m)`` ("has")."""

    pred: str
    modality: str


@dataclass(frozen=True, slots=True)
class OptionTest:
    """``option.NAME`` as a condition: the request's (boolean) option value."""

    name: str


@dataclass(frozen=True, slots=True)
class OptionCompare:
    """``option.NAME OP VALUE``: the request's option compared with a value."""

    name: str
    op: str
    value: object


@dataclass(frozen=True, slots=True)
class CountTest:
    """``request.count(m) OP N``: how many input segments have modality ``m``."""

    modality: str
    op: str
    value: int


@dataclass(frozen=True, slots=True)
class NotCond:
    operand: Cond


@dataclass(frozen=True, slots=True)
class BoolCond:
    op: str  # "and" | "or"
    left: Cond
    right: Cond


Cond = RequestTest | OptionTest | OptionCompare | CountTest | NotCond | BoolCond
Folded = Cond | bool  # a condition after `placed(...)` folding: a tree, or a constant


# ---------------------------------------------------------------- repeat counts


@dataclass(frozen=True, slots=True)
class Num:
    value: int | float


@dataclass(frozen=True, slots=True)
class OptionNum:
    name: str
    is_float: bool  # the option is declared `float`


@dataclass(frozen=True, slots=True)
class NegNum:
    operand: Count


@dataclass(frozen=True, slots=True)
class BinNum:
    op: str  # + - * /
    left: Count
    right: Count


Count = Num | OptionNum | NegNum | BinNum


# ---------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class ArgPlan:
    """``param = value`` of a walk call: ``kind`` is ``segment`` (the `for` variable ``name``),
    ``field`` (field ``attr`` of segment variable ``name``), ``option`` (option ``name``),
    ``first`` (the request's first segment of modality ``name``) or ``persisted`` (the channel
    ``name`` an earlier walk persisted)."""

    param: str
    kind: str
    name: str
    attr: str | None = None


@dataclass(frozen=True, slots=True)
class RunWalkPlan:
    walk: str
    args: tuple[ArgPlan, ...]
    source: str


@dataclass(frozen=True, slots=True)
class FailPlan:
    message: str
    source: str


@dataclass(frozen=True, slots=True)
class ForPlan:
    """Once per input segment, in order, with the segment bound to ``var``."""

    var: str
    body: tuple[Stmt, ...]
    source: str


@dataclass(frozen=True, slots=True)
class RepeatPlan:
    count: Count
    body: tuple[Stmt, ...]
    source: str


@dataclass(frozen=True, slots=True)
class ArmPlan:
    patterns: tuple[str, ...]  # modalities, or ("_",) for the default arm
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class MatchPlan:
    var: str
    arms: tuple[ArmPlan, ...]
    source: str


@dataclass(frozen=True, slots=True)
class OptionArmPlan:
    values: tuple[object, ...]
    default: bool  # the `_` arm
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class OptionMatchPlan:
    """`match option.NAME`: the first arm listing the request's value, else `_`."""

    option: str
    arms: tuple[OptionArmPlan, ...]
    source: str


@dataclass(frozen=True, slots=True)
class IfPlan:
    """``notes``: what `placed(...)` folding decided for this condition (a comment)."""

    cond: Folded
    then: tuple[Stmt, ...]
    else_: tuple[Stmt, ...] | None
    notes: tuple[str, ...]
    source: str


Stmt = RunWalkPlan | FailPlan | ForPlan | RepeatPlan | MatchPlan | OptionMatchPlan | IfPlan


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """One flow: ``body`` for every kind but ``extern``; ``when`` (folded, with its notes) for a
    ``when`` flow; ``stream`` for an ``on_stream`` one."""

    name: str
    kind: FlowKind
    body: tuple[Stmt, ...]
    when: Folded | None
    when_notes: tuple[str, ...]
    stream: str | None
    extern: str | None
    source: str
    when_source: str


# ---------------------------------------------------------------- lowering

SourceFn = Callable[[Span], str]


class FlowLowerer:
    """Lowers the model's flows against one placement (``placed``) and its params."""

    def __init__(
        self,
        placed: frozenset[str],
        placement: str,
        params: dict[str, object],
        options: dict[str, str],
        source: SourceFn,
    ) -> None:
        self.placed = placed
        self.placement = placement
        self.params = params
        self.options = options  # option name -> declared type
        self.source = source

    def flow(self, f: F.Flow) -> FlowPlan:
        body = self.block(f.body, frozenset()) if f.body is not None else ()
        when = fold(f.when, self.placed, self.params) if f.when is not None else None
        notes = self.notes(f.when) if f.when is not None else ()
        return FlowPlan(
            name=f.name,
            kind=FlowKind(f.kind.value),
            body=body,
            when=when,
            when_notes=notes,
            stream=f.on_stream,
            extern=f.extern,
            source=self.source(f.span),
            when_source=self.source(f.trigger_span or f.span),
        )

    def block(self, block: F.FBlock | None, scope: frozenset[str]) -> tuple[Stmt, ...]:
        return tuple(self.stmt(s, scope) for s in (block.stmts if block else ()))

    def stmt(self, s: F.FStmt, scope: frozenset[str]) -> Stmt:
        where = self.source(s.span)
        if isinstance(s, F.WalkCall):
            return RunWalkPlan(s.walk, tuple(self.arg(a, scope) for a in s.args), where)
        if isinstance(s, F.Fail):
            return FailPlan(s.message, where)
        if isinstance(s, F.For):
            return ForPlan(s.var, self.block(s.body, scope | {s.var}), where)
        if isinstance(s, F.Repeat):
            return RepeatPlan(self.count(s.count), self.block(s.body, scope), where)
        if isinstance(s, F.Match):
            arms = tuple(ArmPlan(a.patterns, self.block(a.body, scope)) for a in s.arms)
            return MatchPlan(s.var, arms, where)
        if isinstance(s, F.OptionMatch):
            option_arms = tuple(
                OptionArmPlan(a.values, a.default, self.block(a.body, scope)) for a in s.arms
            )
            return OptionMatchPlan(s.option, option_arms, where)
        then = self.block(s.then, scope)
        else_ = self.block(s.else_, scope) if s.else_ is not None else None
        return IfPlan(
            fold(s.cond, self.placed, self.params), then, else_, self.notes(s.cond), where
        )

    def arg(self, a: F.FArg, scope: frozenset[str]) -> ArgPlan:
        if a.kind is F.ArgKind.OPTION:
            return ArgPlan(a.param, "option", a.name)
        if a.kind is F.ArgKind.SEGMENT_FIELD:
            return ArgPlan(a.param, "field", a.name, a.attr or "")
        if a.kind is F.ArgKind.FIRST:
            return ArgPlan(a.param, "first", a.name)
        if a.name in scope:
            return ArgPlan(a.param, "segment", a.name)
        return ArgPlan(a.param, "persisted", a.name)

    def count(self, e: E.Expr) -> Count:
        if isinstance(e, E.Lit):
            value = e.value
            return Num(value if isinstance(value, int | float) else 0)
        if isinstance(e, E.Ref):
            value = self.params.get(e.name, 0)
            return Num(value if isinstance(value, int | float) else 0)
        if isinstance(e, E.OptionRef):
            return OptionNum(e.name, self.options.get(e.name) == "float")
        if isinstance(e, E.Neg):
            return NegNum(self.count(e.operand))
        return BinNum(e.op, self.count(e.left), self.count(e.right))

    def notes(self, cond: F.Cond) -> tuple[str, ...]:
        """``placed(A) is True, k is 4 ... in placement `p``` for the `placed` and param
        atoms of ``cond``."""
        atoms = F.cond_atoms(cond)
        seen = dict.fromkeys(
            f"placed({a.node}) is {a.node in self.placed}"
            if isinstance(a, F.Placed)
            else f"{a.name} is {self.params.get(a.name)!r}"
            for a in atoms
            if isinstance(a, F.Placed | F.ParamCmp)
        )
        if not seen:
            return ()
        return (", ".join(seen) + f" in placement `{self.placement}`",)


def fold(cond: F.Cond, placed: frozenset[str], params: dict[str, object] | None = None) -> Folded:
    """``cond`` with `placed(...)`, params and constants folded away: a bool, or a tree
    without them."""
    if isinstance(cond, F.Placed):
        return cond.node in placed
    if isinstance(cond, F.ParamCmp):
        v = (params or {}).get(cond.name)
        if cond.op is None:
            return v is True
        return v is not None and compare(cond.op, v, cond.value)
    if isinstance(cond, F.Const):
        return cond.value
    if isinstance(cond, F.RequestPred):
        return RequestTest(cond.pred, cond.modality)
    if isinstance(cond, F.OptionCond):
        return OptionTest(cond.name)
    if isinstance(cond, F.OptionCmp):
        return OptionCompare(cond.name, cond.op, cond.value)
    if isinstance(cond, F.CountCmp):
        return CountTest(cond.modality, cond.op, cond.value or 0)
    if isinstance(cond, F.Not):
        inner = fold(cond.operand, placed, params)
        return (not inner) if isinstance(inner, bool) else NotCond(inner)
    left, right = fold(cond.left, placed, params), fold(cond.right, placed, params)
    absorbing = cond.op == "or"  # True absorbs `or`, False absorbs `and`
    for side, other in ((left, right), (right, left)):
        if isinstance(side, bool):
            return absorbing if side == absorbing else other
    return BoolCond(cond.op, left, right)  # type: ignore[arg-type]


def and_(left: Folded, right: Folded) -> Folded:
    """``left and right``, folded."""
    if isinstance(left, bool):
        return right if left else False
    if isinstance(right, bool):
        return left if right else False
    return BoolCond("and", left, right)


# ---------------------------------------------------------------- what the flows take


def taken_segments(flows: tuple[FlowPlan, ...]) -> tuple[tuple[SegmentSpec, ...], bool]:
    """The input modalities the flows take, with the segment fields they read from each, and
    whether some flow takes segments of any modality (the door's record, `SegmentSpec`).

    A `match` arm takes its modalities unless it `fail`s; ``request.has(M)`` (or a count of M,
    or the first segment of M) takes M; a `for` variable read outside a `match` (passed to a
    walk, or its field), a `_` arm that does not fail, and an extern flow take any modality.
    Statements are walked by their blocks (``body``, ``then``, ``else_``, ``arms``), so every
    kind of statement is seen."""
    taken: dict[str, dict[str, None]] = {}
    open_ = [False]

    def cond(c: object) -> None:
        if c is None or isinstance(c, bool):
            return
        modality = getattr(c, "modality", None)
        if isinstance(modality, str) and getattr(c, "pred", "has") == "has":
            taken.setdefault(modality, {})  # `request.has(m)`, a count of m
        for part in ("operand", "left", "right"):
            cond(getattr(c, part, None))

    def arg(a: ArgPlan, bound: dict[str, tuple[str, ...] | None]) -> None:
        if a.kind == "first":
            taken.setdefault(a.name, {})
        if a.kind not in ("segment", "field") or a.name not in bound:
            return
        mods = bound[a.name]
        if mods is None:
            open_[0] = True
            return
        for m in mods:
            fields = taken.setdefault(m, {})
            if a.kind == "field" and a.attr:
                fields[a.attr] = None

    def visit(body: tuple[object, ...], bound: dict[str, tuple[str, ...] | None]) -> None:
        for s in body:
            if isinstance(s, RunWalkPlan):
                for a in s.args:
                    arg(a, bound)
            elif isinstance(s, MatchPlan):
                for a in s.arms:
                    if any(isinstance(x, FailPlan) for x in a.body):
                        continue
                    if a.patterns == ("_",):
                        open_[0] = True
                    for m in a.patterns:  # taken even when the arm does nothing (`text => { }`)
                        if m != "_":
                            taken.setdefault(m, {})
                    visit(a.body, {**bound, s.var: None if a.patterns == ("_",) else a.patterns})
            else:
                inner = {**bound, s.var: None} if isinstance(s, ForPlan) else bound
                cond(getattr(s, "cond", None))
                for block in ("body", "then", "else_"):
                    visit(getattr(s, block, None) or (), inner)
                for a in getattr(s, "arms", ()):
                    visit(a.body, inner)

    for f in flows:
        if f.kind is FlowKind.EXTERN:
            open_[0] = True
        cond(f.when)
        visit(f.body, {})
    segments = tuple(SegmentSpec(modality=m, fields=tuple(fs)) for m, fs in taken.items())
    return segments, open_[0]
