"""Pass `flows`: the per-request state machine is well formed.

Invariants proved (codes owned):

* WG701: every walk is reachable from some flow (skipped when a flow is an external Python
  generator: the compiler cannot see which walks it runs).
* WG702: a walk argument naming a persisted channel is persisted on *every* path of the flow
  before the call. A must-analysis over the flow's structured statements: a sequence unions what
  its walks persist; `if`/`match` intersect their branches (a missing `else`, or a `match` with no
  `_` arm, adds the path that skips them); paths ending in `fail` drop out of intersections; a
  `for` over the request's inputs runs at least once (the runtime rejects requests without
  inputs); a `repeat` may run zero times unless its count is a static positive integer. Flows run
  side by side, so a channel persisted only by another flow is never ordered before the call.
* WG703: a persisted channel's type, or an `option`'s scalar type, fits the walk input it is
  passed to.
* WG704: every walk input without `?` is passed (a stream-driven flow cannot pass stream data:
  the stream feeds its consumer port by itself).
* WG705: every walk argument value is a `for` variable in scope, `VAR.FIELD` of one, an
  `option.NAME`, or a channel some walk persists.
* WG706: a model that declares walks declares a flow to run them.

Unknown walks (WG106), unknown walk parameters (WG114) and unknown options (WG108) belong to the
names pass and are skipped here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.flow import (
    ArgKind,
    Fail,
    FArg,
    FBlock,
    Flow,
    FlowKind,
    For,
    If,
    Match,
    Repeat,
    WalkCall,
    iter_fstmts,
)
from wgc.ir.model import Model
from wgc.ir.query import persisted_channels, walk_input_type
from wgc.ir.types import Dim, DType, TensorType
from wgc.ir.walk import EdgeKind, Persist, Walk, WalkInput, iter_stmts

NAME = "flows"
CODES = ("WG701", "WG702", "WG703", "WG704", "WG705", "WG706")

# What paths reaching a point must have persisted; None when every path there ended in `fail`.
State = frozenset[str] | None


def run(model: Model) -> list[Diagnostic]:
    out = _reachability(model)
    persisters = _persisters(model)
    for flow in model.flows:
        if flow.body is not None:
            out.extend(_FlowChecker(model, flow, persisters).run())
    return out


# ---------------------------------------------------------------- reachability (WG701, WG706)
def _reachability(model: Model) -> list[Diagnostic]:
    walks = [w for w in model.walks if model.walk(w.name) is w]  # duplicates: the names pass
    if not walks:
        return []
    if not model.flows:
        first = walks[0]
        return [
            diag(
                "WG706",
                f"model `{model.name}` declares walks but no flow",
                _name_span(first),
                label="no flow runs this walk (or any other)",
                help=f"add a flow that runs the walks, e.g. `flow main {{ {first.name}(...) }}`",
            )
        ]
    if any(f.kind is FlowKind.EXTERN for f in model.flows):
        return []  # a Python generator may run any walk
    graph = nx.DiGraph()
    root = ("request", "")
    graph.add_node(root)
    for f in model.flows:
        graph.add_edge(root, ("flow", f.name))
        for s in _calls(f):
            graph.add_edge(("flow", f.name), ("walk", s.walk))
    reached = nx.descendants(graph, root)
    return [
        diag(
            "WG701",
            f"walk `{w.name}` is not reachable from any flow",
            _name_span(w),
            label="never runs",
            help=f"call it from a flow (`{w.name}(...)`), or delete it",
        )
        for w in walks
        if ("walk", w.name) not in reached
    ]


def _calls(flow: Flow) -> Iterable[WalkCall]:
    if flow.body is None:
        return ()
    return (s for s in iter_fstmts(flow.body) if isinstance(s, WalkCall))


def _name_span(w: Walk) -> Span:
    return w.name_span or w.span


# ---------------------------------------------------------------- per-flow checks
def _persisters(model: Model) -> dict[str, list[Walk]]:
    """Channel -> the walks whose body says `persist channel` (resolved or not: an unbound
    persist is WG606's, and must not turn every use into an unknown value here)."""
    out: dict[str, list[Walk]] = {}
    for w in model.walks:
        for name in _persisted_names(w):
            out.setdefault(name, []).append(w)
    return out


def _persisted_names(w: Walk) -> frozenset[str]:
    return frozenset(s.channel for s in iter_stmts(w.body) if isinstance(s, Persist))


_ARM_SKIPS = "this arm does not persist `{}`"
_SKIPS = "this branch does not persist `{}`"
_ALSO = "persist `{}` here too, or end this path with `fail`"


@dataclass(frozen=True, slots=True)
class _Branch:
    """One way through a branching statement, for explaining what it fails to persist."""

    state: State
    span: Span
    lacks: str = ""  # a label with `{}` for the channel name
    fix: str = ""  # a help line with `{}` for the channel name


@dataclass
class _FlowChecker:
    model: Model
    flow: Flow
    persisters: dict[str, list[Walk]]
    diags: list[Diagnostic] = field(default_factory=list)
    # channel -> the latest place a branch dropped it, to show why it may be missing
    dropped: dict[str, tuple[Label, str]] = field(default_factory=dict)

    def run(self) -> list[Diagnostic]:
        assert self.flow.body is not None
        self.block(self.flow.body, frozenset(), ())
        return self.diags

    # ---------------------------------------------------------------- the must-analysis
    def block(self, blk: FBlock, state: State, scope: tuple[str, ...]) -> State:
        for s in blk.stmts:
            state = self.stmt(s, state, scope)
        return state

    def stmt(self, s, state: State, scope: tuple[str, ...]) -> State:
        if isinstance(s, WalkCall):
            self.call(s, state, scope)
            walk = self.model.walk(s.walk)
            if state is None or walk is None:
                return state
            return state | _persisted_names(walk)
        if isinstance(s, Fail):
            return None
        if isinstance(s, For):
            return self.block(s.body, state, (*scope, s.var))  # runs at least once
        if isinstance(s, Match):
            return self.match(s, state, scope)
        if isinstance(s, If):
            then = self.block(s.then, state, scope)
            if s.else_ is None:
                other = _Branch(
                    state,
                    s.span,
                    "`{}` is not persisted when the condition is false",
                    "add an `else` branch that persists `{}` (or ends with `fail`)",
                )
            else:
                other = _Branch(self.block(s.else_, state, scope), s.else_.span, _SKIPS, _ALSO)
            return self.meet([_Branch(then, s.then.span, _SKIPS, _ALSO), other])
        if isinstance(s, Repeat):
            body = self.block(s.body, state, scope)
            if self.static_positive(s.count):
                return body
            return self.meet(
                [
                    _Branch(body, s.span),
                    _Branch(
                        state,
                        s.span,
                        "`repeat` may run zero times",
                        "persist `{}` before the `repeat`, or give it a static positive count",
                    ),
                ]
            )
        return state

    def match(self, m: Match, state: State, scope: tuple[str, ...]) -> State:
        arms = [
            _Branch(self.block(a.body, state, scope), a.span, _ARM_SKIPS, _ALSO) for a in m.arms
        ]
        if not any("_" in a.patterns for a in m.arms):
            arms.append(
                _Branch(
                    state,
                    m.span,
                    "no `_` arm: an unmatched input skips `{}`",
                    "add a `_ => ...` arm that persists `{}` or ends with `fail`",
                )
            )
        return self.meet(arms)

    def meet(self, branches: list[_Branch]) -> State:
        live = [(b, b.state) for b in branches if b.state is not None]
        if not live:
            return None
        common = frozenset.intersection(*(state for _, state in live))
        every = frozenset[str]().union(*(state for _, state in live))
        for b, state in live:
            for name in every - state:
                if b.lacks:
                    self.dropped[name] = (Label(b.span, b.lacks.format(name)), b.fix.format(name))
        return common

    def static_positive(self, count: E.Expr) -> bool:
        params = self.model.param_values()
        if not E.is_static(count, params):
            return False
        try:
            v = E.evaluate(count, params)
        except E.EvalError:
            return False
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    # ---------------------------------------------------------------- one walk call
    def call(self, c: WalkCall, state: State, scope: tuple[str, ...]) -> None:
        walk = self.model.walk(c.walk)
        if walk is None:
            return  # WG106
        for a in c.args:
            inp = walk.input(a.param)
            if a.kind is ArgKind.OPTION:
                if inp is not None:
                    self.option_arg(c, a, walk, inp)
            elif a.kind is ArgKind.SEGMENT_FIELD:
                if a.name not in scope:
                    self.unknown(c, a, scope)
            elif a.name not in scope:
                self.channel_arg(c, a, walk, inp, state, scope)
        self.missing(c, walk)

    def channel_arg(self, c, a: FArg, walk: Walk, inp, state: State, scope) -> None:
        if a.name not in self.persisters:
            self.unknown(c, a, scope)
            return
        if state is not None and a.name not in state:
            self.not_persisted(c, a)
        if inp is not None:
            self.channel_type(c, a, walk)

    def not_persisted(self, c: WalkCall, a: FArg) -> None:
        sites = [s for s in _calls(self.flow) if a.name in self.persisted_by(s.walk)]
        labels: list[Label] = []
        fix = ""
        if a.name in self.dropped:
            label, fix = self.dropped[a.name]
            labels.append(label)
        # the branch that drops it says more than where it is persisted
        shown = [s for s in sites if s.span >= c.span] if labels else sites
        for s in shown[:2]:
            if s.span == c.span:
                text = "this call persists it only after it runs"
            elif s.span > c.span:
                text = f"persisted by `{s.walk}` here, after this call"
            else:
                text = f"persisted by `{s.walk}` here, but not on every path"
            labels.append(Label(_call_name_span(s), text))
        notes = []
        if sites:
            hint = fix or (
                f"persist `{a.name}` on every path before this call: in every `match` arm and "
                "both branches of an `if` (or end the other paths with `fail`)"
            )
        else:
            others = sorted({w.name for w in self.persisters[a.name]})
            notes.append(
                f"`{a.name}` is persisted only by {_names(others)}, which flow "
                f"`{self.flow.name}` does not call; flows run side by side, so another flow's "
                "`persist` is not ordered before this call"
            )
            hint = f"call a walk that persists `{a.name}` earlier in flow `{self.flow.name}`"
        self.diags.append(
            diag(
                "WG702",
                f"`{a.name}` may be used before it is persisted",
                _value_span(a),
                label="not persisted on every path to this call",
                labels=labels,
                notes=notes,
                help=hint,
            )
        )

    def persisted_by(self, walk_name: str) -> frozenset[str]:
        w = self.model.walk(walk_name)
        return _persisted_names(w) if w is not None else frozenset()

    def channel_type(self, c: WalkCall, a: FArg, walk: Walk) -> None:
        want = walk_input_type(self.model, walk, a.param)
        if want is None:
            return
        called = {s.walk for s in _calls(self.flow)}
        candidates = [w for w in self.persisters[a.name] if w.name in called]
        for pw in candidates or self.persisters[a.name]:
            got = persisted_channels(self.model, pw).get(a.name)
            if got is None or got.agrees(want):
                continue
            site = next(
                (e.span for e in pw.edges if e.kind is EdgeKind.PERSISTED and e.channel == a.name),
                None,
            )
            self.diags.append(
                diag(
                    "WG703",
                    f"`{a.name}` is `{got}` but input `{a.param}` of walk `{walk.name}` is "
                    f"`{want}`",
                    _value_span(a),
                    label=f"`{got}`",
                    labels=[Label(site, f"persisted by `{pw.name}` as `{got}`")] if site else [],
                    help=f"pass a channel of type `{want}`, or change the type of input "
                    f"`{a.param}`",
                )
            )
            return

    def option_arg(self, c: WalkCall, a: FArg, walk: Walk, inp: WalkInput) -> None:
        decl = self.model.option(a.name)
        want = walk_input_type(self.model, walk, a.param)
        if decl is None or want is None or _option_fits(decl.type, want):
            return  # unknown options are WG108
        self.diags.append(
            diag(
                "WG703",
                f"option `{a.name}` is a `{decl.type}` but input `{a.param}` of walk "
                f"`{walk.name}` is `{want}`",
                _value_span(a),
                label=f"a `{decl.type}` option",
                labels=[Label(decl.span, "declared here")],
                help="an `int` option fits an `i32`/`i64` scalar (`[]` or `[1]`), a `float` one "
                "an `f16`/`bf16`/`f32` scalar, a `bool` one a `bool` scalar; a `str` option "
                "cannot be passed to a walk",
            )
        )

    def unknown(self, c: WalkCall, a: FArg, scope: tuple[str, ...]) -> None:
        assert self.flow.body is not None  # only a flow with a body is checked (see `__init__`)
        loop_vars = {s.var for s in iter_fstmts(self.flow.body) if isinstance(s, For)}
        written = a.name if a.kind is ArgKind.NAME else f"{a.name}.{a.attr}"
        if a.name in loop_vars:
            label = f"`{a.name}` is not bound here"
            hint = (
                f"`{a.name}` is only bound inside its `for {a.name} in request.inputs {{ ... }}`; "
                "move the call into the loop"
            )
        elif a.kind is ArgKind.SEGMENT_FIELD:
            label = f"`{a.name}` is not a `for` variable"
            hint = "`VAR.FIELD` reads a field of the input segment bound by `for VAR in ...`"
        else:
            label = "not a persisted channel or a `for` variable"
            mean = did_you_mean(a.name, [*self.persisters, *scope], end=" ")
            hint = (
                f"{mean}a walk argument is a `for` variable, `VAR.FIELD`, `option.NAME`, or a "
                "channel some walk persists (`persist NAME`)"
            )
        self.diags.append(
            diag(
                "WG705",
                f"unknown value `{written}` in argument `{a.param}` of walk `{c.walk}`",
                _value_span(a),
                label=label,
                help=hint,
            )
        )

    def missing(self, c: WalkCall, walk: Walk) -> None:
        passed = {a.param for a in c.args}
        gaps = [i for i in walk.inputs if not i.optional and i.name not in passed]
        if not gaps:
            return
        names = _names([i.name for i in gaps])
        plural = "s" if len(gaps) > 1 else ""
        example = ", ".join(f"{i.name} = ..." for i in gaps)
        notes = []
        if self.flow.kind is FlowKind.ON_STREAM:
            notes.append(
                f"flow `{self.flow.name}` runs once per chunk of stream `{self.flow.on_stream}`; "
                "the chunk feeds the stream's consumer port by itself, not a walk input"
            )
        self.diags.append(
            diag(
                "WG704",
                f"walk `{walk.name}` is called without its input{plural} {names}",
                _call_name_span(c),
                label=f"missing {names}",
                labels=[Label(i.span, f"`{i.name}` declared here") for i in gaps],
                notes=notes,
                help=f"pass {'them' if gaps[1:] else 'it'}: `{walk.name}({example})`, or mark "
                f"the input{plural} optional (`{gaps[0].name}?`) if the walk can run without "
                + ("them" if gaps[1:] else "it"),
            )
        )


# ---------------------------------------------------------------- helpers
def _option_fits(kind: str, t: TensorType) -> bool:
    dtypes = {
        "int": (DType.I32, DType.I64),
        "float": (DType.F16, DType.BF16, DType.F32),
        "bool": (DType.BOOL,),
    }.get(kind, ())
    scalar = t.rank == 0 or (t.rank == 1 and t.dims[0].agrees(Dim.int_(1)))
    return t.dtype in dtypes and scalar


def _value_span(a: FArg) -> Span:
    """The value of ``param = value`` (its last token(s)); the whole argument if unsure."""
    text = {
        ArgKind.NAME: a.name,
        ArgKind.OPTION: f"option.{a.name}",
        ArgKind.SEGMENT_FIELD: f"{a.name}.{a.attr}",
    }[a.kind]
    sp = a.span
    start = sp.end_col - len(text)
    if sp.end_line != sp.line or start < sp.col:
        return sp
    return Span(sp.file, sp.line, start, sp.line, sp.end_col)


def _call_name_span(c: WalkCall) -> Span:
    sp = c.span
    return Span(sp.file, sp.line, sp.col, sp.line, sp.col + len(c.walk))


def _names(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
