"""Pass `unused`: lints (warnings) for declarations and bindings nothing uses.

Invariants checked (codes owned, all warnings):

* WG901: every node is called by some walk, is the base of a `like` node, or is named by
  `placed(NODE)` in a flow.
* WG902: every param is referenced: by another param, a dim (`f32[hidden * 2]`), a loop bound,
  a `repeat` count, a chunk-policy argument, a node `config` or an option default.
* WG903: every type alias is named by a port, a walk input or another alias.
* WG904: every stream's producer node and consumer node are called by some walk.
* WG905: every channel a call binds is read: by a call, `emit`, `persist`, a loop's
  `until`/`yield`, or (for a stream's producer port) the stream.
* WG906: every option is read: by a flow condition, `match option.NAME`, a walk argument, an
  expression, a node (`reads option.NAME`: its implementation reads it), a dim (a shape bucket)
  or as the selector of a per-mode default.
* WG907: every walk input is read in its walk.
* WG908: every subflow is called by some flow (directly or through another subflow).

Names that do not resolve belong to the names pass; reads that could not be resolved (the walk's
`Issue`s) belong to their own passes, so a binding they name is not reported again here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.ir import expr as E
from wgc.ir.decls import Stream
from wgc.ir.flow import (
    ArgKind,
    Flow,
    If,
    OptionCmp,
    OptionCond,
    OptionMatch,
    ParamCmp,
    Placed,
    Repeat,
    WalkCall,
    cond_atoms,
    iter_fstmts,
)
from wgc.ir.model import Model
from wgc.ir.types import DimKind, TensorType
from wgc.ir.walk import Bind, Call, EdgeKind, EndKind, Loop, Walk

NAME = "unused"
CODES = ("WG901", "WG902", "WG903", "WG904", "WG905", "WG906", "WG907", "WG908")

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    out += _nodes(model)
    out += _params(model)
    out += _types(model)
    out += _streams(model)
    out += _options(model)
    out += _subflows(model)
    for w in model.walks:
        out += _channels(model, w)
        out += _inputs(w)
    return out


# ---------------------------------------------------------------- what the model refers to
def _called(model: Model) -> set[str]:
    return {c.node for w in model.walks for c in w.calls}


def _flow_conds(model: Model) -> Iterator:
    """Every leaf condition of every flow (`when` triggers and `if`s) and subflow."""
    for f in model.flows:
        if f.when is not None:
            yield from cond_atoms(f.when)
    for s in _all_fstmts(model):
        if isinstance(s, If):
            yield from cond_atoms(s.cond)


def _fstmts(f: Flow) -> Iterable:
    return iter_fstmts(f.body) if f.body is not None else ()


def _all_fstmts(model: Model) -> Iterator:
    """Every statement of every flow and subflow, as written (subflow calls not expanded)."""
    for f in model.flows:
        body = f.written or f.body
        yield from iter_fstmts(body) if body is not None else ()
    for sub in model.subflows:
        yield from iter_fstmts(sub.body)


def _exprs(model: Model) -> Iterator[E.Expr]:
    """Every compile-time expression as written."""
    for p in model.params:
        yield p.expr
    for o in model.options:
        if o.default_expr is not None:
            yield o.default_expr
        yield from o.arm_exprs
    for n in model.nodes:
        for _, ex in n.config_exprs:
            yield ex
    for s in model.streams:
        for a in s.policy.args:
            yield a.expr
    for w in model.walks:
        for lp in w.loops:
            yield lp.max_expr
    for s in _all_fstmts(model):
        if isinstance(s, Repeat):
            yield s.count


def _types(model: Model) -> list[Diagnostic]:
    used = {p.type_ref for n in model.nodes for p in (*n.inputs, *n.outputs)}
    used |= {i.type_ref for w in model.walks for i in w.inputs}
    used |= {t.ref for t in model.types}
    return [
        diag(
            "WG903",
            f"type `{t.name}` is never used",
            t.name_span or t.span,
            label="declared here, never used",
            help=f"use it as a port or walk-input type (`x: {t.name}`), or delete it",
        )
        for t in _firsts(model.types, model.type)
        if t.name not in used
    ]


def _all_types(model: Model) -> Iterator[TensorType]:
    for n in model.nodes:
        for p in (*n.inputs, *n.outputs):
            if p.type is not None:
                yield p.type
    for w in model.walks:
        for i in w.inputs:
            if i.type is not None:
                yield i.type
    for t in model.types:
        if t.type is not None:
            yield t.type


def _params(model: Model) -> list[Diagnostic]:
    used = {r.name for ex in _exprs(model) for r in E.refs(ex)}
    used |= {c.name for c in _flow_conds(model) if isinstance(c, ParamCmp)}
    for t in _all_types(model):
        for d in t.dims:
            if d.kind in (DimKind.PARAM, DimKind.BUCKET, DimKind.BOUNDED) and d.name:
                # a dim written as an expression keeps its rendered text: take every name in it
                used |= set(_WORD.findall(d.name))
    return [
        diag(
            "WG902",
            f"param `{p.name}` is never used",
            p.name_span or p.span,
            label="declared here, never used",
            help="use it (in a type, a loop bound, a chunk policy or a `config`), or delete it",
        )
        for p in _firsts(model.params, model.param)
        if p.name not in used
    ]


def _options(model: Model) -> list[Diagnostic]:
    used = {r.name for ex in _exprs(model) for r in E.option_refs(ex)}
    used |= {c.name for c in _flow_conds(model) if isinstance(c, OptionCond | OptionCmp)}
    for s in _all_fstmts(model):
        if isinstance(s, WalkCall):
            used |= {a.name for a in s.args if a.kind is ArgKind.OPTION}
        elif isinstance(s, OptionMatch):
            used.add(s.option)
    used |= {name for n in model.nodes for name in n.reads}
    used |= {o.default_by for o in model.options if o.default_by is not None}
    used |= model.dim_options
    return [
        diag(
            "WG906",
            f"option `{o.name}` is never used",
            o.name_span or o.span,
            label="declared here, never read",
            help=f"read it in a flow (`if option.{o.name} {{ ... }}` or `w(x = option.{o.name})`)"
            f", declare the nodes that read it (`reads option.{o.name}`), or delete it",
        )
        for o in _firsts(model.options, model.option)
        if o.name not in used
    ]


def _subflows(model: Model) -> list[Diagnostic]:
    return [
        diag(
            "WG908",
            f"subflow `{sub.name}` is never called",
            sub.name_span or sub.span,
            label="declared here, never called",
            help=f"call it from a flow (`{sub.name}(...)`), or delete it",
        )
        for sub in _firsts(model.subflows, model.subflow)
        if not sub.called
    ]


def _nodes(model: Model) -> list[Diagnostic]:
    used = _called(model)
    used |= {n.like for n in model.nodes if n.like}
    used |= {c.node for c in _flow_conds(model) if isinstance(c, Placed)}
    return [
        diag(
            "WG901",
            f"node `{n.name}` is never called",
            n.name_span or n.span,
            label="declared here, never called",
            help=f"call it in a walk (`{n.name}(...)`), or delete it",
        )
        for n in _firsts(model.nodes, model.node)
        if n.name not in used
    ]


def _streams(model: Model) -> list[Diagnostic]:
    called = _called(model)
    out = []
    for s in _firsts(model.streams, model.stream):
        idle = [
            (side, ref)
            for side, ref in (("producer", s.producer), ("consumer", s.consumer))
            if model.node(ref.node) is not None and ref.node not in called
        ]
        if idle:
            out.append(_idle_stream(s, idle))
    return out


def _idle_stream(s: Stream, idle: list) -> Diagnostic:
    if len(idle) == 2:
        what = (
            f"neither its producer `{s.producer.node}` nor its consumer `{s.consumer.node}` "
            "is called"
        )
    else:
        side, ref = idle[0]
        what = f"its {side} `{ref.node}` is never called"
    effect = "never fed" if idle[0][0] == "producer" else "never read"
    return diag(
        "WG904",
        f"stream `{s.name}` is {effect}: {what}",
        s.name_span or s.span,
        label=effect,
        labels=[Label(ref.span, f"`{ref.node}` is never called") for _, ref in idle],
        help="call " + " and ".join(f"`{ref.node}`" for _, ref in idle) + " in a walk, or "
        "delete the stream",
    )


def _firsts(items, lookup) -> list:
    """Declarations that own their name (a duplicate is the names pass's WG101)."""
    return [x for x in items if lookup(x.name) is x]


# ---------------------------------------------------------------- inside walks
def _channels(model: Model, w: Walk) -> list[Diagnostic]:
    read_ends = {
        (e.src.call, e.src.port, e.channel if e.kind is not EdgeKind.STREAMED else None)
        for e in w.edges
        if e.src.kind is EndKind.CALL
    }
    streamed = {(c, p) for c, p, ch in read_ends if ch is None}
    troubled = {i.channel for i in w.issues}  # their passes report them
    out = []
    for c in w.calls:
        node = model.node(c.node)
        if node is None:
            continue  # WG102
        yielded = _yielded(w, c)
        for b in c.writes:
            if (
                node.output(b.port) is None  # WG103 / WG113
                or (c.id, b.port, b.channel) in read_ends
                or (c.id, b.port) in streamed
                or b.channel in yielded
                or b.channel in troubled
            ):
                continue
            out.append(_unread(c, b))
    return out


def _yielded(w: Walk, c: Call) -> set[str]:
    """What the loops around ``c`` yield or stop on: a binding they name is used."""
    out: set[str] = set()
    for name in c.loops:
        lp: Loop | None = w.loop(name)
        if lp is not None:
            out |= {n.name for n in (*lp.yield_last, *lp.yield_all)}
            if lp.until is not None:
                out.add(lp.until.name)
    return out


def _unread(c: Call, b: Bind) -> Diagnostic:
    written = b.channel if b.channel == b.port else f"{b.channel} = {b.port}"
    return diag(
        "WG905",
        f"channel `{b.channel}` is bound but never read",
        b.span,
        label="never read",
        help=f"drop `{written}` from the outputs of `{c.node}`, or read `{b.channel}` "
        "(in a call, `emit`, or `persist`)",
    )


def _inputs(w: Walk) -> list[Diagnostic]:
    read = {e.src.name for e in w.edges if e.src.kind is EndKind.INPUT}
    troubled = {i.channel for i in w.issues}
    seen: set[str] = set()
    out = []
    for i in w.inputs:
        if i.name in seen or i.name in read or i.name in troubled:
            continue
        seen.add(i.name)
        sp = i.span
        out.append(
            diag(
                "WG907",
                f"input `{i.name}` of walk `{w.name}` is never read",
                Span(sp.file, sp.line, sp.col, sp.line, sp.col + len(i.name)),
                label="never read",
                help=f"read `{i.name}` in the walk's body, or remove it from the inputs (and "
                "from the flows that pass it)",
            )
        )
    return out
