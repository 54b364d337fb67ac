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

An `emit` / `persist` is a destination of its producer's port when it runs in the producer's
scope (once per value). One in a loop whose value comes from outside the loop's iteration (a
walk input, a value bound before the loop, an earlier loop's yield, a loop-carried value read
before its binding) fires once per iteration instead: it becomes a *sink unit* (`SinkSpec`),
fed like a call input and counted in its loops like a call, on a rank that already takes part
in its innermost loop where one does (the producer's when it can).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span
from wgc.ir.model import Model
from wgc.ir.walk import Block, Edge, EdgeKind, Emit, End, EndKind, Loop, Par, Persist, Walk
from wgc.lower import index
from wgc.lower.streams import stream_capacity
from wgc.lower.typespec import type_spec
from wgc_runtime.contract.conductor import WalkInputSpec
from wgc_runtime.contract.kinds import DestKind, InputMode, SourceKind
from wgc_runtime.contract.kinds import Edge as EdgeName
from wgc_runtime.contract.spec import (
    CallSpec,
    Dest,
    LoopSpec,
    PieceSpec,
    PortIn,
    PortOut,
    SinkSpec,
    Source,
)

SourceFn = Callable[[Span], str]

_AFTER_LOOP_KINDS = (EdgeKind.TERMINAL, EdgeKind.ACCUMULATED)
_SINK_ENDS = (EndKind.CLIENT, EndKind.PERSIST)
SINK_PORT = "value"  # a sink unit's one input port


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
    calls: dict[int, CallSpec] = field(default_factory=dict)
    sinks: dict[int, SinkSpec] = field(default_factory=dict)
    loops: dict[int, list[LoopSpec]] = field(default_factory=dict)  # rank -> its loop copies
    hops: list[Hop] = field(default_factory=list)
    inputs: tuple[WalkInputSpec, ...] = ()
    persists: tuple[tuple[str, int], ...] = ()
    loop_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    parents: dict[str, str | None] = field(default_factory=dict)  # loop -> enclosing loop
    # rank -> (its calls, its sinks) in id order: built by the first `piece`, once the walk is
    # lowered (a scan of every call per rank made a walk over R ranks cost R^2)
    _by_rank: dict[int, tuple[list[CallSpec], list[SinkSpec]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def ranks(self) -> tuple[int, ...]:
        units = (*self.calls.values(), *self.sinks.values())
        return tuple(sorted({c.rank for c in units}))

    def piece(self, rank: int, source: str) -> PieceSpec:
        """Rank ``rank``'s piece of the walk, indexed for the executor (`wgc.lower.index`)."""
        if self._by_rank is None:
            self._by_rank = {}
            for _, c in sorted(self.calls.items()):
                self._by_rank.setdefault(c.rank, ([], []))[0].append(c)
            for _, u in sorted(self.sinks.items()):
                self._by_rank.setdefault(u.rank, ([], []))[1].append(u)
        mine = self._by_rank.get(rank, ([], []))
        calls, sinks = tuple(mine[0]), tuple(mine[1])
        ports = [p for c in calls for p in c.inputs] + [u.input for u in sinks]
        read = {
            s.name
            for p in ports
            for s in (p.src, p.init)
            if s is not None and s.kind is SourceKind.INPUT
        }
        inputs = tuple(i.name for i in self.walk.inputs if i.name in read)
        loops = tuple(self.loops.get(rank, []))
        return index.piece(self.walk.name, rank, calls, sinks, loops, inputs, source)


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


def sink_statements(block: Block, loops: tuple[str, ...] = (), out: dict | None = None) -> dict:
    """The span of every `emit` / `persist` -> (the statement, its enclosing loops)."""
    out = {} if out is None else out
    for s in block.stmts:
        if isinstance(s, Emit | Persist):
            out[s.span] = (s, loops)
        elif isinstance(s, Par):
            for b in s.branches:
                sink_statements(b, loops, out)
        elif isinstance(s, Loop):
            sink_statements(s.body, (*loops, s.name), out)
    return out


@dataclass(frozen=True, slots=True)
class _Unit:
    """A sink unit being planned: its id, rank, loops and statement, and its input edges."""

    id: int
    rank: int
    loops: tuple[str, ...]
    stmt: Emit | Persist
    edges: tuple[Edge, ...]


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
        self.units = self.sink_units(body_ranks)
        self.unit_of: dict[int, _Unit] = {id(e): u for u in self.units for e in u.edges}
        for u in self.units:
            for lp in u.loops:
                body_ranks.setdefault(lp, set()).add(u.rank)
        self.loop_ranks = {lp: tuple(sorted(rs)) for lp, rs in body_ranks.items()}

    # ------------------------------------------------------------------ sink units
    def scope_of(self, e: Edge) -> tuple[str, ...]:
        """The loops the value an edge reads lives in (a yield: outside its yielding loop)."""
        if e.via is not None and e.via_loop is not None:
            chain: list[str] = []
            cur = self.parents.get(e.via_loop)
            while cur is not None:
                chain.append(cur)
                cur = self.parents.get(cur)
            return tuple(reversed(chain))
        if e.src.kind is EndKind.CALL and e.src.call is not None:
            return self.walk.calls[e.src.call].loops
        return ()

    def sink_units(self, body_ranks: dict[str, set[int]]) -> list[_Unit]:
        stmts = sink_statements(self.walk.body)
        edges: dict = {}
        for e in self.walk.edges:
            if e.dst.kind in _SINK_ENDS and e.span in stmts:
                edges.setdefault(e.span, []).append(e)
        units: list[_Unit] = []
        next_id = len(self.walk.calls)
        for span, (stmt, loops) in stmts.items():
            es = edges.get(span, [])
            if not loops or not es:
                continue
            carried = any(e.kind is EdgeKind.LOOP_INIT for e in es)
            if not carried and all(len(self.scope_of(e)) >= len(loops) for e in es):
                continue  # in its producer's scope: a destination of the producer's port
            rank = self.unit_rank(es, loops, body_ranks)
            units.append(_Unit(next_id, rank, loops, stmt, tuple(es)))
            next_id += 1
        return units

    def unit_rank(self, es: list[Edge], loops: tuple[str, ...], body_ranks) -> int:
        """The producer's rank when it takes part in the unit's innermost loop, else a rank
        that does, else the producer's (or the walk's first) rank."""
        inner = body_ranks.get(loops[-1], set())
        producers = [
            self.ranks[e.src.call]
            for e in sorted(es, key=lambda e: e.kind is EdgeKind.LOOP_INIT)
            if e.src.kind is EndKind.CALL and e.src.call in self.ranks
        ]
        for r in producers:
            if r in inner:
                return r
        if inner:
            return min(inner)
        if producers:
            return producers[0]
        return min(self.ranks.values(), default=0)

    def unit_input(self, u: _Unit) -> PortIn:
        init = next((e for e in u.edges if e.kind is EdgeKind.LOOP_INIT), None)
        other = next((e for e in u.edges if e.kind is not EdgeKind.LOOP_INIT), None)
        typ = type_spec(u.edges[0].type)
        if init is not None:
            s = self.src(other.src) if other is not None else self.src(init.src)
            i = self.src(init.src)
            return PortIn(
                port=SINK_PORT,
                channel=u.stmt.channel,
                mode=InputMode.CARRIED,
                src=s,
                init=i,
                type=typ,
                optional=self.optional_input(i),
                loop=init.loop,
            )
        s = self.src(u.edges[0].src)
        return PortIn(
            port=SINK_PORT,
            channel=u.stmt.channel,
            mode=InputMode.ONCE,
            src=s,
            type=typ,
            optional=self.optional_input(s),
        )

    def sink_spec(self, u: _Unit) -> SinkSpec:
        if isinstance(u.stmt, Emit):
            dest = Dest(
                kind=DestKind.CLIENT,
                edge=EdgeName.EMITTED,
                name=u.stmt.modality,
                channel=u.stmt.channel,
            )
        else:
            dest = Dest(kind=DestKind.PERSIST, edge=EdgeName.PERSISTED, name=u.stmt.channel)
        return SinkSpec(
            id=u.id,
            rank=u.rank,
            loops=u.loops,
            input=self.unit_input(u),
            dest=dest,
            source=self.source(u.stmt.span),
        )

    def unit_dest(self, e: Edge, u: _Unit) -> Dest:
        """The destination of an edge into sink unit ``u``: its input port, like a call's."""
        init = next((x for x in u.edges if x.kind is EdgeKind.LOOP_INIT), None)
        kind, loop, carried = "loop_invariant", u.loops[-1], False
        if e.kind is EdgeKind.LOOP_INIT:  # iteration 0's value (an earlier loop's: at its end)
            kind, loop = "loop_init", e.loop
        elif init is not None:  # the in-loop binding, read by the next iteration
            kind, loop, carried = "loop_carried", init.loop, True
        if e.via is not None:  # a nested loop's yield (carried too): once, when that loop ends
            kind, loop = e.via.value, e.via_loop
        return Dest(
            kind=DestKind.CALL,
            edge=EdgeName(kind),
            rank=u.rank,
            call=u.id,
            port=SINK_PORT,
            loop=loop,
            carried=carried,
        )

    # ------------------------------------------------------------------ entry
    def lower(self) -> LoweredWalk:
        out = LoweredWalk(self.walk, loop_ranks=self.loop_ranks, parents=self.parents)
        for c in self.walk.calls:
            inputs = self.port_ins(c.id)
            outputs = self.port_outs(c.id, out.hops)
            pushes = dict.fromkeys(
                d.name or "" for o in outputs for d in o.dests if d.kind is DestKind.STREAM
            )
            out.calls[c.id] = CallSpec(
                id=c.id,
                node=c.node,
                rank=self.ranks[c.id],
                loops=c.loops,
                inputs=inputs,
                outputs=outputs,
                writes=self.writes(c.id),
                pushes=tuple(pushes),
                source=self.source(c.span),
            )
        for u in self.units:
            out.sinks[u.id] = self.sink_spec(u)
        for lp in self.walk.loops:
            for r in self.loop_ranks.get(lp.name, ()):
                out.loops.setdefault(r, []).append(self.loop_spec(lp, r))
        out.inputs = self.input_specs()
        out.persists = self.persists()
        return out

    # ------------------------------------------------------------------ sources
    def src(self, end: End) -> Source:
        if end.kind is EndKind.CALL:
            rank = self.ranks.get(end.call or 0)
            return Source(kind=SourceKind.CALL, rank=rank, call=end.call, port=end.port)
        if end.kind is EndKind.STREAM:
            return Source(kind=SourceKind.STREAM, name=end.name)
        return Source(kind=SourceKind.INPUT, name=end.name)

    def optional_input(self, s: Source | None) -> bool:
        if s is None or s.kind is not SourceKind.INPUT or s.name is None:
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
            src = self.src(stream.src)
            return PortIn(
                port=port, channel=stream.channel, mode=InputMode.STREAM, src=src, type=typ
            )
        carried = next((e for e in edges if e.kind is EdgeKind.LOOP_CARRIED), None)
        if carried is not None:
            init = next((e for e in edges if e.kind is EdgeKind.LOOP_INIT), None)
            s, i = self.src(carried.src), self.src(init.src) if init else None
            return PortIn(
                port=port,
                channel=carried.channel,
                mode=InputMode.CARRIED,
                src=s,
                init=i,
                type=typ,
                optional=self.optional_input(i),
                loop=carried.loop,
            )
        e = edges[0]
        changes = (e.kind is EdgeKind.INTERNAL and e.loop is not None) or (
            e.kind in _AFTER_LOOP_KINDS and bool(call.loops)
        )
        mode = InputMode.PER_ITERATION if changes else InputMode.ONCE
        s = self.src(e.src)
        return PortIn(
            port=port,
            channel=e.channel,
            mode=mode,
            src=s,
            type=typ,
            optional=self.optional_input(s),
        )

    # ------------------------------------------------------------------ destinations
    def dest(self, e: Edge) -> Dest:
        unit = self.unit_of.get(id(e))
        if unit is not None:
            return self.unit_dest(e, unit)
        kind, carried = e.kind.value, e.kind is EdgeKind.LOOP_CARRIED
        loop = e.loop
        if e.via is not None:  # a loop's yield read as something else: once, at that loop's end
            kind, loop = e.via.value, e.via_loop
        if e.kind in (EdgeKind.EMITTED, EdgeKind.PERSISTED):
            carried = (e.dst, e.channel, e.loop) in self.carried_reads
        d = e.dst
        edge = EdgeName(kind)
        if d.kind is EndKind.CALL:
            rank = self.ranks.get(d.call or 0)
            return Dest(
                kind=DestKind.CALL,
                edge=edge,
                rank=rank,
                call=d.call,
                port=d.port,
                loop=loop,
                carried=carried,
            )
        if d.kind is EndKind.CLIENT:
            return Dest(
                kind=DestKind.CLIENT,
                edge=edge,
                name=d.name,
                loop=loop,
                carried=carried,
                channel=e.channel,
            )
        if d.kind is EndKind.PERSIST:
            return Dest(kind=DestKind.PERSIST, edge=edge, name=d.name, loop=loop, carried=carried)
        if d.kind is EndKind.STREAM:
            owner = self.stream_owner.get(d.name or "")
            stream = next((s for s in self.model.streams if s.name == d.name), None)
            credits = stream_capacity(stream) if stream is not None else 0
            return Dest(
                kind=DestKind.STREAM, edge=edge, rank=owner, name=d.name, loop=loop, credits=credits
            )
        ranks = self.loop_ranks.get(d.name or "", ())
        return Dest(kind=DestKind.UNTIL, edge=edge, name=d.name, loop=d.name, ranks=ranks)

    def hop_loop(self, e: Edge, producer_loops: tuple[str, ...]) -> str | None:
        unit = self.unit_of.get(id(e))
        if unit is not None:
            return _common_loop(producer_loops, unit.loops)
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
                if d not in dests or d.kind is DestKind.CLIENT:  # every `emit` emits
                    dests.append(d)
            p = node.output(port) if node else None
            typ = type_spec(p.type if p else None)
            result.append(PortOut(port=port, type=typ, dests=tuple(dests)))
        return tuple(result)

    # ------------------------------------------------------------------ loops and conductor
    def loop_spec(self, lp: Loop, rank: int) -> LoopSpec:
        """Rank ``rank``'s copy of ``lp``; `index.piece` fills in its indexes."""
        stop = self.until.get(lp.name)
        until = self.src(stop) if stop is not None else None
        calls = tuple(sorted(c for c in self.body_calls.get(lp.name, ()) if self.ranks[c] == rank))
        return LoopSpec(
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

    def input_specs(self) -> tuple[WalkInputSpec, ...]:
        out = []
        for inp in self.walk.inputs:
            dests: list[Dest] = []
            for e in self.from_inputs.get(inp.name, []):
                if e.dst.kind is EndKind.CALL and e.dst.call not in self.ranks:
                    continue
                d = self.dest(e)
                if d not in dests or d.kind is DestKind.CLIENT:  # every `emit` emits
                    dests.append(d)
            ranks = _call_ranks(dests)
            out.append(
                WalkInputSpec(
                    name=inp.name,
                    optional=inp.optional,
                    ranks=ranks,
                    dests=tuple(dests),
                    type=type_spec(inp.type),
                )
            )
        return tuple(out)

    def persists(self) -> tuple[tuple[str, int], ...]:
        out: dict[str, int] = {}
        for e in self.walk.edges:
            if e.kind is not EdgeKind.PERSISTED or e.channel in out:
                continue
            unit = self.unit_of.get(id(e))
            if unit is not None:
                out[e.channel] = unit.rank
            elif e.src.kind is EndKind.CALL and e.src.call in self.ranks:
                out[e.channel] = self.ranks[e.src.call]
            elif e.src.kind is EndKind.INPUT:
                out[e.channel] = -1
        return tuple(out.items())


def _call_ranks(dests: list[Dest]) -> tuple[int, ...]:
    return tuple(sorted({d.rank for d in dests if d.kind is DestKind.CALL and d.rank is not None}))
