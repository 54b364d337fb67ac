"""Pass `flows`: the per-request state machine is well formed.

Invariants proved (codes owned):

* WG701: every walk is reachable from some flow (skipped when a flow is an external Python
  generator: the compiler cannot see which walks it runs).
* WG702: a walk argument naming a persisted channel is persisted on *every* path of the flow
  before the call. The analysis is path-sensitive (`wgc.ir.paths`): it follows what each
  branch tests about the request (`request.has/wants/count`, options, `placed(NODE)`, the
  segment's modality inside a `for`), so a channel persisted only under some condition counts
  wherever that condition is known to hold: inside `if request.has(audio)`, or after `if not
  request.has(audio) { fail ... }`, for a channel the `audio` arm of a `for`/`match` persists.
  A sequence adds what its walks persist; an `if` or `match` keeps what a branch persisted under
  that branch's condition; paths ending in `fail` drop out; a `for` over the request's inputs
  runs at least once (the runtime rejects requests without inputs), and what one of its
  iterations persisted for a segment of modality `m` is persisted when the request has an `m`
  segment; a `repeat` may run zero times unless its count is a static positive integer. Flows
  run side by side, so a channel persisted only by another flow is never ordered before the
  call.
* WG703: a persisted channel's type, or an `option`'s kind, fits the walk input it is passed to
  (a `str` option fits a 1-D integer input of any length: its UTF-8 bytes).
* WG704: every walk input without `?` is passed (a stream-driven flow cannot pass stream data:
  the stream feeds its consumer port by itself).
* WG705: every walk argument value is a `for` variable in scope, `VAR.FIELD` of one, an
  `option.NAME`, `request.first(m)`, or a channel some walk persists.
* WG706: a model that declares walks declares a flow to run them.
* WG707: `request.first(m)` is only passed where every path knows the request has an `m`
  segment (`request.has(m)`, `request.count(m) >= 1`, or a `fail` when it has none).

Calls written in a subflow are checked where the subflow is expanded, each in its own context.
Unknown walks (WG106), unknown walk parameters (WG114) and unknown options (WG108) belong to the
names pass and are skipped here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.ir import expr as E
from wgc.ir import paths as P
from wgc.ir.flow import (
    ArgKind,
    Arm,
    FBlock,
    Flow,
    FlowKind,
    For,
    If,
    Match,
    OptionArm,
    Repeat,
    WalkCall,
)
from wgc.ir.model import Model
from wgc.ir.walk import Persist, Walk, iter_stmts
from wgc.passes import flow_args as A

NAME = "flows"
CODES = ("WG701", "WG702", "WG703", "WG704", "WG705", "WG706", "WG707")


def run(model: Model) -> list[Diagnostic]:
    out = _reachability(model)
    persisters = _persisters(model)
    alg = algebra(model)
    for flow in model.flows:
        if flow.body is not None:
            out.extend(_FlowChecker(model, flow, persisters, alg).run())
    return out


def algebra(model: Model, known: Mapping | None = None) -> P.Algebra:
    """The path algebra of ``model``'s options (``known``: atoms a placement decides)."""
    choices = {o.name: o.choices for o in model.options if o.choices}
    bools = [o.name for o in model.options if o.type == "bool"]
    return P.Algebra(choices, bools, known)


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
        for s in A.calls(f):
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
# (label, help) for a way that persists nothing of its own, by what it is
_SKIP_TEXT = {
    If: (
        "`{}` is not persisted when the condition is false",
        "add an `else` branch that persists `{}` (or ends with `fail`)",
    ),
    Match: (
        "no `_` arm: an unmatched input skips `{}`",
        "add a `_ => ...` arm that persists `{}` or ends with `fail`",
    ),
}


@dataclass(frozen=True)
class _St(P.State):
    """A path, and for each channel the condition under which it is persisted there."""

    have: Mapping[str, P.DNF] = field(default_factory=dict)


class _FlowChecker(P.PathWalker):
    def __init__(
        self, model: Model, flow: Flow, persisters: dict[str, list[Walk]], alg: P.Algebra
    ) -> None:
        super().__init__(alg)
        self.model = model
        self.flow = flow
        self.persisters = persisters
        self.diags: list[Diagnostic] = []
        self.scope: tuple[str, ...] = ()
        # channel -> the latest place a branch dropped it, to show why it may be missing
        self.dropped: dict[str, tuple[Label, str]] = {}

    def run(self) -> list[Diagnostic]:
        assert self.flow.body is not None
        start = self.alg.cond(self.flow.when) if self.flow.when is not None else P.TRUE
        self.block(self.flow.body, _St(start if start is not None else P.TRUE))
        return self.diags

    # ---------------------------------------------------------------- the walker's hooks
    def stmt(self, s, st):
        if isinstance(s, For):  # the loop variable is in scope in its body
            self.scope = (*self.scope, s.var)
            try:
                return super().stmt(s, st)
            finally:
                self.scope = self.scope[:-1]
        return super().stmt(s, st)

    def with_path(self, st: P.State, path: P.DNF) -> _St:
        assert isinstance(st, _St)
        return _St(path, st.have)

    def runs(self, s: Repeat) -> bool:
        params = self.model.param_values()
        if not E.is_static(s.count, params):
            return False
        try:
            v = E.evaluate(s.count, params)
        except E.EvalError:
            return False
        return isinstance(v, int) and not isinstance(v, bool) and v > 0

    def call(self, c: WalkCall, st: P.State) -> _St:
        assert isinstance(st, _St)
        self.check_call(c, st)
        walk = self.model.walk(c.walk)
        if walk is None:
            return st
        return _St(st.path, {**st.have, **dict.fromkeys(_persisted_names(walk), P.TRUE)})

    def merge(self, exits: list) -> _St | None:
        live = [(e, cond, node) for e, cond, node in exits if e is not None]
        if not live:
            return None
        path = P.FALSE
        for e, _, _ in live:
            path = self.alg.or_(path, e.path)
        have: dict[str, P.DNF] = {}
        for name in {n for e, _, _ in live for n in e.have}:
            if all(e.have.get(name) == P.TRUE for e, _, _ in live):
                have[name] = P.TRUE
                continue
            guard = P.FALSE
            for e, cond, node in live:
                mine = e.have.get(name, P.FALSE)
                if mine != P.TRUE:
                    self.drop(name, node)
                part = self.alg.and_(cond, mine, over=False) if cond is not None else None
                guard = self.alg.or_(guard, part or P.FALSE, over=False)
            if guard:
                have[name] = guard
        return _St(path, have)

    def drop(self, name: str, node) -> None:
        if isinstance(node, Arm | OptionArm):
            label, fix = _ARM_SKIPS, _ALSO
        elif isinstance(node, FBlock):
            label, fix = _SKIPS, _ALSO
        elif isinstance(node, If | Match):
            label, fix = _SKIP_TEXT[type(node)]
        else:  # `match option.NAME` without `_`
            label = f"no `_` arm: another value of `option.{node.option}` skips `{{}}`"
            fix = _SKIP_TEXT[Match][1]
        self.dropped[name] = (Label(node.span, label.format(name)), fix.format(name))

    def for_exit(self, entry: P.State, body: P.State, var: str) -> _St:
        assert isinstance(body, _St)
        have = {n: self.alg.for_guard(g, var) for n, g in body.have.items()}
        path = self.alg.for_exit(entry.path, body.path, var)
        return _St(path, {n: g for n, g in have.items() if g})

    def repeat_exit(self, s: Repeat, entry: P.State, body: P.State | None) -> P.State | None:
        if self.runs(s) or body is None:
            return body if self.runs(s) else entry
        assert isinstance(entry, _St) and isinstance(body, _St)
        for name in body.have:
            if entry.have.get(name) != P.TRUE:
                self.dropped[name] = (
                    Label(s.span, "`repeat` may run zero times"),
                    f"persist `{name}` before the `repeat`, or give it a static positive count",
                )
        return _St(self.alg.or_(entry.path, body.path), entry.have)

    # ---------------------------------------------------------------- one walk call
    def check_call(self, c: WalkCall, st: _St) -> None:
        walk = self.model.walk(c.walk)
        if walk is None:
            return  # WG106
        for a in c.args:
            inp = walk.input(a.param)
            if a.kind is ArgKind.OPTION:
                if inp is not None:
                    self.add(A.option_arg(self.model, a, walk, inp))
            elif a.kind is ArgKind.FIRST:
                self.first(c, a, st)
            elif a.kind is ArgKind.SEGMENT_FIELD:
                if a.name not in self.scope:
                    self.add(A.unknown_value(self.flow, c, a, self.scope, list(self.persisters)))
            elif a.name not in self.scope:
                self.channel_arg(c, a, walk, inp, st)
        self.add(A.missing(self.flow, c, walk))

    def add(self, d: Diagnostic | None) -> None:
        if d is not None:
            self.diags.append(d)

    def channel_arg(self, c: WalkCall, a, walk: Walk, inp, st: _St) -> None:
        if a.name not in self.persisters:
            self.add(A.unknown_value(self.flow, c, a, self.scope, list(self.persisters)))
            return
        if not self.alg.implies(st.path, st.have.get(a.name, P.FALSE)):
            self.not_persisted(c, a)
        if inp is not None:
            self.add(A.channel_type(self.model, self.flow, c, a, walk, self.persisters))

    def first(self, c: WalkCall, a, st: _St) -> None:
        has = self.alg.lit(("has", a.name))
        if self.alg.implies(st.path, has):
            return
        self.diags.append(
            diag(
                "WG707",
                f"`request.first({a.name})` may find no `{a.name}` segment",
                A.value_span(a),
                label=f"not every path to this call knows the request has `{a.name}` input",
                labels=A.via_labels(c),
                help=f"guard the call (`if request.has({a.name}) {{ ... }}`), or end the other "
                f'requests first (`if not request.has({a.name}) {{ fail "..." }}`)',
            )
        )

    def not_persisted(self, c: WalkCall, a) -> None:
        sites = [s for s in A.calls(self.flow) if a.name in self.persisted_by(s.walk)]
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
            labels.append(Label(A.call_name_span(s), text))
        labels += A.via_labels(c)
        notes = []
        if sites:
            hint = fix or (
                f"persist `{a.name}` on every path before this call: in every `match` arm and "
                "both branches of an `if` (or end the other paths with `fail`)"
            )
        else:
            others = sorted({w.name for w in self.persisters[a.name]})
            notes.append(
                f"`{a.name}` is persisted only by {A.join_names(others)}, which flow "
                f"`{self.flow.name}` does not call; flows run side by side, so another flow's "
                "`persist` is not ordered before this call"
            )
            hint = f"call a walk that persists `{a.name}` earlier in flow `{self.flow.name}`"
        self.diags.append(
            diag(
                "WG702",
                f"`{a.name}` may be used before it is persisted",
                A.value_span(a),
                label="not persisted on every path to this call",
                labels=labels,
                notes=notes,
                help=hint,
            )
        )

    def persisted_by(self, walk_name: str) -> frozenset[str]:
        w = self.model.walk(walk_name)
        return _persisted_names(w) if w is not None else frozenset()
