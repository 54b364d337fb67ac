"""One walk, lowered: each call's ports (modes, sources, destinations), each rank's loop copies.

Input port modes come from the IR edge kinds (`wgc.ir.resolve`), relative to the consumer's
innermost loop: a value fixed for a whole instance of that loop is ``once`` (walk inputs,
loop-invariant values, and terminal / accumulated values read outside any loop); a value that
changes every iteration of it is ``per_iteration`` (internal edges inside a loop, and terminal /
accumulated values of a nested loop read in the enclosing loop's body); a `LOOP_CARRIED` +
`LOOP_INIT` pair is ``carried``; a stream consumer port is ``stream``.

A rank takes part in a loop when it runs a call in the loop's body (nested loops included):
every value crossing the loop boundary each iteration (internal, loop-carried, `until`) has
both ends in the body, so those ranks are exactly the ones that must step together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span
from wgc.ir.model import Model
from wgc.ir.walk import Block, Edge, EdgeKind, End, EndKind, Loop, Par, Walk
from wgc.lower.plan import (
    CallPlan,
    Dest,
    LoopPlan,
    PiecePlan,
    PortIn,
    PortOut,
    Source,
    WalkInputPlan,
)
from wgc.lower.typespec import type_spec

SourceFn = Callable[[Span], str]

_AFTER_LOOP_KINDS = (EdgeKind.TERMINAL, EdgeKind.ACCUMULATED)


@dataclass(frozen=True, slots=True)
class Hop:
    """One destination of one produced value: a route table entry before grouping."""

    call: int
    rank: int
    port: str
    channel: str
    edge: Edge
    dest: Dest
    loop: str | None  # innermost loop enclosing both ends (None: once per walk instance)


@dataclass
class LoweredWalk:
    walk: Walk
    calls: dict[int, CallPlan] = field(default_factory=dict)
    loops: dict[int, list[LoopPlan]] = field(default_factory=dict)  # rank -> its loop copies
    hops: list[Hop] = field(default_factory=list)
    inputs: tuple[WalkInputPlan, ...] = ()
    persists: tuple[tuple[str, int], ...] = ()
    loop_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)  # loop -> enclosing loop

    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({c.rank for c in self.calls.values()}))

    def piece(self, rank: int, source: str) -> PiecePlan:
        calls = tuple(c for _, c in sorted(self.calls.items()) if c.rank == rank)
        read = {
            s.name
            for c in calls
            for p in c.inputs
            for s in (p.src, p.init)
            if s is not None and s.kind == "input"
        }
        return PiecePlan(
            walk=self.walk.name,
            rank=rank,
            calls=calls,
            loops=tuple(self.loops.get(rank, [])),
            inputs=tuple(i.name for i in self.walk.inputs if i.name in read),
            source=source,
        )


def loop_parents(block: Block, parent: str | None = None, out: dict | None = None) -> dict:
    """Loop name -> the name of its enclosing loop (None at the walk's top level)."""
    out = {} if out is None else out
    for s in block.stmts:
        if isinstance(s, Loop):
            out.setdefault(s.name, parent)
            loop_parents(s.body, s.name, out)
        elif isinstance(s, Par):
            for b in s.branches:
                loop_parents(b, parent, out)
    return out


def _common_loop(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """The innermost loop enclosing both loop chains."""
    common = None
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common = x
    return common


class WalkLowerer:
    """Lowers one walk whose every call has a rank; the IR edges are indexed once up front."""

    def __init__(
        self,
        model: Model,
        walk: Walk,
        ranks: dict[int, int],
        stream_owner: dict[str, int],
        source: SourceFn,
    ) -> None:
        self.model = model
        self.walk = walk
        self.ranks = ranks
        self.stream_owner = stream_owner
        self.source = source
        self.into: dict[tuple[int, str], list[Edge]] = {}
        self.out_of: dict[tuple[int, str], list[Edge]] = {}
        self.from_inputs: dict[str, list[Edge]] = {}
        # (dst end, channel, loop) of LOOP_INIT edges: marks the read as carried
        self.carried_reads: set[tuple[End, str, str | None]] = set()
        self.until: dict[str, End] = {}  # loop -> the producer of its stop channel
        for e in walk.edges:
            if e.dst.kind is EndKind.CALL and e.dst.call in ranks:
                self.into.setdefault((e.dst.call, e.dst.port or ""), []).append(e)
            if e.src.kind is EndKind.CALL and e.src.call in ranks:
                self.out_of.setdefault((e.src.call, e.src.port or ""), []).append(e)
            if e.src.kind is EndKind.INPUT and e.src.name is not None:
                self.from_inputs.setdefault(e.src.name, []).append(e)
            if e.kind is EdgeKind.LOOP_INIT:
                self.carried_reads.add((e.dst, e.channel, e.loop))
            if e.kind is EdgeKind.UNTIL and e.dst.name is not None:
                self.until.setdefault(e.dst.name, e.src)
        self.parents = loop_parents(walk.body)
        body_ranks: dict[str, set[int]] = {}
        self.body_calls: dict[str, list[int]] = {}
        for c in walk.calls:
            for lp in c.loops:
                body_ranks.setdefault(lp, set()).add(ranks[c.id])
                self.body_calls.setdefault(lp, []).append(c.id)
        self.loop_ranks = {lp: tuple(sorted(rs)) for lp, rs in body_ranks.items()}

    # ------------------------------------------------------------------ entry
    def lower(self) -> LoweredWalk:
        out = LoweredWalk(self.walk, loop_ranks=self.loop_ranks, parents=self.parents)
        for c in self.walk.calls:
            inputs = self.port_ins(c.id)
            outputs = self.port_outs(c.id, out.hops)
            out.calls[c.id] = CallPlan(
                id=c.id,
                node=c.node,
                rank=self.ranks[c.id],
                loops=c.loops,
                inputs=inputs,
                outputs=outputs,
                writes=self.writes(c.id),
                source=self.source(c.span),
            )
        for lp in self.walk.loops:
            for r in self.loop_ranks.get(lp.name, ()):
                out.loops.setdefault(r, []).append(self.loop_plan(lp, r))
        out.inputs = self.input_plans()
        out.persists = self.persists()
        return out

    # ------------------------------------------------------------------ sources
    def src(self, end: End) -> Source:
        if end.kind is EndKind.CALL:
            return Source("call", rank=self.ranks.get(end.call or 0), call=end.call, port=end.port)
        if end.kind is EndKind.STREAM:
            return Source("stream", name=end.name)
        return Source("input", name=end.name)

    def optional_input(self, s: Source | None) -> bool:
        if s is None or s.kind != "input" or s.name is None:
            return False
        inp = self.walk.input(s.name)
        return bool(inp and inp.optional)

    def port_ins(self, call_id: int) -> tuple[PortIn, ...]:
        call = self.walk.calls[call_id]
        node = self.model.node(call.node)
        order = {p.name: i for i, p in enumerate(node.inputs)} if node else {}
        ports = sorted(self._ports_into(call_id), key=lambda p: (order.get(p, len(order)), p))
        out = []
        for port in ports:
            pi = self.port_in(call_id, port, self.into[(call_id, port)])
            if pi is not None:
                out.append(pi)
        return tuple(out)

    def _ports_into(self, call_id: int) -> set[str]:
        call = self.walk.calls[call_id]
        node = self.model.node(call.node)
        names = {b.port for b in call.reads} | ({p.name for p in node.inputs} if node else set())
        return {p for p in names if (call_id, p) in self.into}

    def port_in(self, call_id: int, port: str, edges: list[Edge]) -> PortIn | None:
        call = self.walk.calls[call_id]
        node = self.model.node(call.node)
        p = node.input(port) if node else None
        typ = type_spec(p.type if p else edges[0].type)
        stream = next((e for e in edges if e.kind is EdgeKind.STREAMED), None)
        if stream is not None:
            return PortIn(port, stream.channel, "stream", self.src(stream.src), None, typ)
        carried = next((e for e in edges if e.kind is EdgeKind.LOOP_CARRIED), None)
        if carried is not None:
            init = next((e for e in edges if e.kind is EdgeKind.LOOP_INIT), None)
            s, i = self.src(carried.src), self.src(init.src) if init else None
            opt = self.optional_input(i)
            return PortIn(port, carried.channel, "carried", s, i, typ, opt)
        e = edges[0]
        changes = (e.kind is EdgeKind.INTERNAL and e.loop is not None) or (
            e.kind in _AFTER_LOOP_KINDS and bool(call.loops)
        )
        mode = "per_iteration" if changes else "once"
        s = self.src(e.src)
        return PortIn(port, e.channel, mode, s, None, typ, self.optional_input(s))

    # ------------------------------------------------------------------ destinations
    def dest(self, e: Edge) -> Dest:
        kind, carried = e.kind.value, e.kind is EdgeKind.LOOP_CARRIED
        loop = e.loop
        if e.via is not None:  # a loop's yield read as something else: once, at that loop's end
            kind, loop = e.via.value, e.via_loop
        if e.kind in (EdgeKind.EMITTED, EdgeKind.PERSISTED):
            carried = (e.dst, e.channel, e.loop) in self.carried_reads
        d = e.dst
        if d.kind is EndKind.CALL:
            rank = self.ranks.get(d.call or 0)
            return Dest("call", kind, rank, d.call, d.port, loop=loop, carried=carried)
        if d.kind is EndKind.CLIENT:
            return Dest("client", kind, name=d.name, loop=loop, carried=carried)
        if d.kind is EndKind.PERSIST:
            return Dest("persist", kind, name=d.name, loop=loop, carried=carried)
        if d.kind is EndKind.STREAM:
            owner = self.stream_owner.get(d.name or "")
            return Dest("stream", kind, owner, name=d.name, loop=loop)
        ranks = self.loop_ranks.get(d.name or "", ())
        return Dest("until", kind, name=d.name, loop=d.name, ranks=ranks)

    def hop_loop(self, e: Edge, producer_loops: tuple[str, ...]) -> str | None:
        d = e.dst
        if d.kind is EndKind.CALL and d.call is not None:
            return _common_loop(producer_loops, self.walk.calls[d.call].loops)
        if d.kind is EndKind.UNTIL:
            return d.name
        if e.kind is EdgeKind.LOOP_INIT:
            return self.parents.get(e.loop or "")  # once per instance of the loop it feeds
        return producer_loops[-1] if producer_loops else None

    def writes(self, call_id: int) -> tuple[str, ...]:
        """The output ports the call binds in the source, in the node's port order."""
        call = self.walk.calls[call_id]
        node = self.model.node(call.node)
        order = {p.name: i for i, p in enumerate(node.outputs if node else ())}
        bound = {w.port for w in call.writes}
        return tuple(sorted(bound, key=lambda p: (order.get(p, len(order)), p)))

    def port_outs(self, call_id: int, hops: list[Hop]) -> tuple[PortOut, ...]:
        call = self.walk.calls[call_id]
        node = self.model.node(call.node)
        outs = node.outputs if node else ()
        order = {p.name: i for i, p in enumerate(outs)}
        names = {w.port for w in call.writes} | {p.name for p in outs}
        ports = sorted(
            (p for p in names if (call_id, p) in self.out_of),
            key=lambda p: (order.get(p, len(order)), p),
        )
        rank = self.ranks[call_id]
        result = []
        for port in ports:
            dests: list[Dest] = []
            for e in self.out_of[(call_id, port)]:
                d = self.dest(e)
                hops.append(Hop(call_id, rank, port, e.channel, e, d, self.hop_loop(e, call.loops)))
                if d not in dests:
                    dests.append(d)
            p = node.output(port) if node else None
            result.append(PortOut(port, type_spec(p.type if p else None), tuple(dests)))
        return tuple(result)

    # ------------------------------------------------------------------ loops and conductor
    def loop_plan(self, lp: Loop, rank: int) -> LoopPlan:
        stop = self.until.get(lp.name)
        until = self.src(stop) if stop is not None else None
        calls = tuple(sorted(c for c in self.body_calls.get(lp.name, ()) if self.ranks[c] == rank))
        return LoopPlan(
            name=lp.name,
            parent=self.parents.get(lp.name),
            max=lp.max if lp.max is not None else 1,
            until=until,
            eager=lp.eager,
            speculate=lp.speculate,
            ranks=self.loop_ranks.get(lp.name, ()),
            calls=calls,
            yield_last=tuple(n.name for n in lp.yield_last),
            yield_all=tuple(n.name for n in lp.yield_all),
            source=self.source(lp.span),
        )

    def input_plans(self) -> tuple[WalkInputPlan, ...]:
        out = []
        for inp in self.walk.inputs:
            dests: list[Dest] = []
            for e in self.from_inputs.get(inp.name, []):
                if e.dst.kind is EndKind.CALL and e.dst.call not in self.ranks:
                    continue
                d = self.dest(e)
                if d not in dests:
                    dests.append(d)
            ranks = _call_ranks(dests)
            out.append(WalkInputPlan(inp.name, inp.optional, ranks, tuple(dests)))
        return tuple(out)

    def persists(self) -> tuple[tuple[str, int], ...]:
        out: dict[str, int] = {}
        for e in self.walk.edges:
            if e.kind is not EdgeKind.PERSISTED or e.channel in out:
                continue
            if e.src.kind is EndKind.CALL and e.src.call in self.ranks:
                out[e.channel] = self.ranks[e.src.call]
            elif e.src.kind is EndKind.INPUT:
                out[e.channel] = -1
        return tuple(out.items())


def _call_ranks(dests: list[Dest]) -> tuple[int, ...]:
    return tuple(sorted({d.rank for d in dests if d.kind == "call" and d.rank is not None}))
