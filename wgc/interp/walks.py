"""Running one walk, eagerly, straight from the IR's resolved edges.

A walk's statements are grouped per *scope* (the walk body, or one iteration of a loop body;
`par` branches bind into the scope around them and run one after the other). A scope runs its
*units* (calls, nested loops as a whole, `emit`, `persist`) in dataflow order: the order of the
edges that deliver a value within one run of the scope, ties broken by source order. Values
live in *frames*, one per scope run, keyed by the producing port (`End`), so a read follows its
edge to the frame that holds the value:

- ``input``: the walk's argument (``None`` for an optional input not passed: a bare signal);
- ``internal`` / ``loop_invariant``: the nearest frame outward holding the producer's value;
- ``loop_init`` / ``loop_carried``: iteration 0 of the loop reads the value before the loop,
  iteration i+1 the value iteration i bound (its frame is kept as ``prev``);
- ``terminal`` / ``accumulated``: when a loop ends, its yielded channels are stored in the
  enclosing frame: ``yield last`` the last iteration's value, ``yield all`` every iteration's
  value stacked on a new dim 0.

Loops run at most ``max`` iterations; with ``until`` the loop stops after the iteration whose
stop channel is true (no speculative iteration: the interpreter is the specification).
Blocking points (a stream chunk not ready, a full stream) are `Wait`s yielded to the request's
scheduler, so every function that runs statements is a generator.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch

from wgc.interp.request import RequestError, RequestFailed
from wgc.ir.model import Model
from wgc.ir.walk import (
    Block,
    Call,
    Edge,
    EdgeKind,
    Emit,
    End,
    EndKind,
    Loop,
    Par,
    Persist,
    Walk,
)


@dataclass(slots=True)
class Wait:
    """A blocked task: resume it once ``ready()`` holds."""

    ready: Callable[[], bool]
    what: str


Steps = Generator[Wait, None, Any]

_ORDER_EXCLUDED = frozenset({EdgeKind.LOOP_CARRIED, EdgeKind.UNTIL, EdgeKind.STREAMED})
_SINKS = (EndKind.CLIENT, EndKind.PERSIST)


# ---------------------------------------------------------------------------------- analysis
@dataclass
class WalkPlan:
    """What the interpreter needs to know about one walk, computed once per model."""

    walk: Walk
    reads: dict[tuple[int, str], list[Edge]] = field(default_factory=dict)
    sink_reads: dict[Any, list[Edge]] = field(default_factory=dict)  # by the statement's span
    sink_loops: dict[Any, tuple[str, ...]] = field(default_factory=dict)
    until: dict[str, Edge] = field(default_factory=dict)
    units: dict[int, list[Any]] = field(default_factory=dict)  # id(block) -> ordered units

    @staticmethod
    def of(walk: Walk) -> WalkPlan:
        p = WalkPlan(walk)
        p._index_sinks(walk.body, ())
        for e in walk.edges:
            if e.kind is EdgeKind.UNTIL and e.dst.name is not None:
                p.until[e.dst.name] = e
            elif e.kind is EdgeKind.STREAMED:
                continue
            elif e.dst.kind is EndKind.CALL and e.dst.call is not None:
                p.reads.setdefault((e.dst.call, e.dst.port or ""), []).append(e)
            elif e.dst.kind in _SINKS:
                p.sink_reads.setdefault(e.span, []).append(e)
        p._order(walk.body, ())
        return p

    def _index_sinks(self, block: Block, loops: tuple[str, ...]) -> None:
        for s in block.stmts:
            if isinstance(s, Emit | Persist):
                self.sink_loops[s.span] = loops
            elif isinstance(s, Par):
                for b in s.branches:
                    self._index_sinks(b, loops)
            elif isinstance(s, Loop):
                self._index_sinks(s.body, (*loops, s.name))

    def _order(self, block: Block, loops: tuple[str, ...]) -> None:
        """Order the units of the scope ``block`` opens (and recursively of its loops)."""
        units = _flatten(block)
        pos = {_unit_key(u): i for i, u in enumerate(units)}
        g = nx.DiGraph()
        g.add_nodes_from(pos)
        carried_sinks = {
            e.span for e in self.walk.edges if e.kind is EdgeKind.LOOP_INIT and e.dst.kind in _SINKS
        }
        for e in self.walk.edges:
            if e.kind in _ORDER_EXCLUDED:
                continue
            if e.kind in (EdgeKind.EMITTED, EdgeKind.PERSISTED) and e.span in carried_sinks:
                continue  # an emit of a loop-carried channel reads the previous iteration
            src = self._unit_in(self._end_loops(e.src, e.span), loops, e.src, e.span)
            dst = self._unit_in(self._end_loops(e.dst, e.span), loops, e.dst, e.span)
            if src is not None and dst is not None and src != dst and src in pos and dst in pos:
                g.add_edge(src, dst)
        try:
            order = list(nx.lexicographical_topological_sort(g, key=pos.__getitem__))
        except nx.NetworkXUnfeasible:
            raise RequestFailed(
                RequestError("internal", f"walk `{self.walk.name}` has a dataflow cycle")
            ) from None
        by_key = {_unit_key(u): u for u in units}
        self.units[id(block)] = [by_key[k] for k in order]
        for u in units:
            if isinstance(u, Loop):
                self._order(u.body, (*loops, u.name))

    def _end_loops(self, end: End, span: Any) -> tuple[str, ...] | None:
        if end.kind is EndKind.CALL and end.call is not None:
            return self.walk.calls[end.call].loops
        if end.kind in _SINKS:
            return self.sink_loops.get(span)
        return None  # walk inputs and streams are outside every scope

    @staticmethod
    def _unit_in(where, scope: tuple[str, ...], end: End, span: Any):
        """The unit of scope ``scope`` that contains ``end`` (None when it is outside)."""
        if where is None or where[: len(scope)] != scope:
            return None
        if len(where) > len(scope):
            return ("loop", where[len(scope)])
        if end.kind is EndKind.CALL:
            return ("call", end.call)
        return ("sink", span)


def _flatten(block: Block) -> list[Any]:
    """The units of one scope, in source order: `par` branches inline, loops whole."""
    out: list[Any] = []
    for s in block.stmts:
        if isinstance(s, Par):
            for b in s.branches:
                out.extend(_flatten(b))
        else:
            out.append(s)
    return out


def _unit_key(u: Any):
    if isinstance(u, Call):
        return ("call", u.id)
    if isinstance(u, Loop):
        return ("loop", u.name)
    return ("sink", u.span)


def binding_end(block: Block, channel: str) -> End | None:
    """The producer of the last binding of ``channel`` in ``block`` (loops: their yields)."""
    found: End | None = None
    for s in block.stmts:
        if isinstance(s, Call):
            for w in s.writes:
                if w.channel == channel:
                    found = End(EndKind.CALL, s.id, w.port)
        elif isinstance(s, Par):
            for b in s.branches:
                found = binding_end(b, channel) or found
        elif isinstance(s, Loop) and channel in {n.name for n in (*s.yield_last, *s.yield_all)}:
            found = binding_end(s.body, channel) or found
    return found


# ---------------------------------------------------------------------------------- frames
class Frame:
    """The values bound in one run of a scope; ``prev`` is the previous iteration's frame."""

    __slots__ = ("iteration", "loop", "parent", "prev", "values")

    def __init__(self, parent: Frame | None, loop: str | None = None, iteration: int = 0):
        self.parent = parent
        self.loop = loop
        self.iteration = iteration
        self.prev: Frame | None = None
        self.values: dict[Any, torch.Tensor | None] = {}

    def local(self, end: End) -> tuple[bool, Any, Any]:
        """(found, key, value) in this frame: a port's value, or a `yield all` stack."""
        for key in (end, ("all", end)):
            if key in self.values:
                return True, key, self.values[key]
        return False, None, None

    def lookup(self, end: End) -> tuple[bool, Any]:
        f: Frame | None = self
        while f is not None:
            found, _, value = f.local(end)
            if found:
                return True, value
            f = f.parent
        return False, None

    def loop_frame(self, loop: str) -> Frame | None:
        f: Frame | None = self
        while f is not None and f.loop != loop:
            f = f.parent
        return f

    def iterations(self) -> tuple[int, ...]:
        out = []
        f: Frame | None = self
        while f is not None:
            if f.loop is not None:
                out.append(f.iteration)
            f = f.parent
        return tuple(reversed(out))


# ---------------------------------------------------------------------------------- running
class WalkRun:
    """One run of one walk for one flow of a request. ``host`` is the request interpreter: it
    calls nodes (`host.call_node`), records emits and keeps the flow's persisted store."""

    def __init__(self, host, model: Model, plan: WalkPlan, flow: str, args: dict[str, Any]):
        self.host = host
        self.model = model
        self.plan = plan
        self.walk = plan.walk
        self.flow = flow
        self.args = args

    def fail(self, message: str, kind: str = "internal", node: str | None = None) -> RequestFailed:
        return RequestFailed(RequestError(kind, message, self.flow, self.walk.name, node))

    def run(self) -> Steps:
        yield from self.scope(self.walk.body, Frame(None))

    def scope(self, block: Block, frame: Frame) -> Steps:
        for u in self.plan.units[id(block)]:
            if isinstance(u, Call):
                yield from self.call(u, frame)
            elif isinstance(u, Loop):
                yield from self.loop(u, frame)
            elif isinstance(u, Emit):
                value = self.read(self.plan.sink_reads.get(u.span, []), frame, u.channel)
                self.host.emit(self, u, value, frame.iterations())
            elif isinstance(u, Persist):
                value = self.read(self.plan.sink_reads.get(u.span, []), frame, u.channel)
                self.host.persist(self, u.channel, value)

    # -------------------------------------------------------------- reads
    def read(self, edges: list[Edge], frame: Frame, channel: str) -> torch.Tensor | None:
        if not edges:
            raise self.fail(f"channel `{channel}` has no value (unresolved read)")
        init = next((e for e in edges if e.kind is EdgeKind.LOOP_INIT), None)
        if init is not None:
            assert init.loop is not None  # a loop-init edge names its loop
            lf = frame.loop_frame(init.loop)
            if lf is None:
                raise self.fail(f"loop `{init.loop}` of a carried read is not running")
            if lf.iteration == 0:
                return self.value_of(init.src, lf.parent, channel)
            carried = next(e for e in edges if e is not init)
            assert lf.prev is not None
            found, _, value = lf.prev.local(carried.src)
            if not found:
                raise self.fail(f"loop-carried channel `{channel}` was not bound last iteration")
            return value
        return self.value_of(edges[0].src, frame, channel)

    def value_of(self, src: End, frame: Frame | None, channel: str) -> torch.Tensor | None:
        if src.kind is EndKind.INPUT:
            return self.args.get(src.name or "")
        found, value = frame.lookup(src) if frame is not None else (False, None)
        if not found:
            raise self.fail(f"channel `{channel}` is read before it is bound")
        return value

    # -------------------------------------------------------------- calls
    def call(self, c: Call, frame: Frame) -> Steps:
        inputs = {
            b.port: self.read(self.plan.reads.get((c.id, b.port), []), frame, b.channel)
            for b in c.reads
        }
        outputs = yield from self.host.call_node(self, c, inputs, frame.iterations())
        for port, value in outputs.items():
            frame.values[End(EndKind.CALL, c.id, port)] = value

    # -------------------------------------------------------------- loops
    def loop(self, lp: Loop, frame: Frame) -> Steps:
        if lp.max is None:
            raise self.fail(f"loop `{lp.name}` has no static `max`")
        stacks: dict[str, list] = {n.name: [] for n in lp.yield_all}
        prev: Frame | None = None
        for i in range(lp.max):
            it = Frame(frame, lp.name, i)
            it.prev = prev
            yield from self.scope(lp.body, it)
            for name, values in stacks.items():
                values.append(self.yielded(lp, it, name)[1])
            prev = it
            if lp.until is not None and self.stopped(lp, it):
                break
        if prev is None:
            return
        for n in lp.yield_last:
            key, value = self.yielded(lp, prev, n.name)
            frame.values[key] = value
        for n in lp.yield_all:
            end = binding_end(lp.body, n.name)
            values = stacks[n.name]
            if any(v is None for v in values):
                raise self.fail(f"`yield all {n.name}` of loop `{lp.name}` has a bare signal")
            frame.values[("all", end)] = torch.stack(values)

    def yielded(self, lp: Loop, it: Frame, channel: str) -> tuple[Any, Any]:
        end = binding_end(lp.body, channel)
        found, key, value = it.local(end) if end is not None else (False, None, None)
        if not found:
            raise self.fail(f"loop `{lp.name}` yields `{channel}`, which its body did not bind")
        return key, value

    def stopped(self, lp: Loop, it: Frame) -> bool:
        e = self.plan.until.get(lp.name)
        if e is None:
            raise self.fail(f"`until` channel of loop `{lp.name}` is not bound in its body")
        found, _, value = it.local(e.src)
        if not found:
            raise self.fail(f"loop `{lp.name}`: the call binding `until {e.channel}` did not run")
        if value is None or value.numel() == 0:
            return False
        return bool(value.reshape(-1)[0].item())
