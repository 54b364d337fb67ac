"""The route table and the cross-rank transfers, from the hops of every lowered walk.

A route row is one produced (walk, call, port, channel) with all its destinations; rows come in
walk source order, then call id, then the node's port order. Every destination on another rank
is a transfer (an `until` destination is one per rank of the loop other than the producer's);
consumers on one rank share one transfer.

Values also cross ranks between walks: a channel one walk persists on the rank that produced it
and a flow passes to a later walk whose readers sit on other ranks (`persisted_transfers`: text
embeddings made on rank 0 and read by a denoiser on rank 2), and the node state a handoff moves
between rank groups (`state_transfers`: one request's KV at its declared `kv_tokens` bound, else
of a size only the run knows). A value whose dims are shape buckets counts the bytes of its
largest bucket.
"""

from __future__ import annotations

from collections.abc import Iterable

from wgc.ir.types import Dim
from wgc.lower import flowplan as FP
from wgc.lower.capture import largest_nbytes
from wgc.lower.pieces import Hop, LoweredWalk
from wgc.lower.plan import Route, Transfer
from wgc.lower.typespec import type_spec
from wgc_runtime.contract.conductor import WalkSpec
from wgc_runtime.contract.kinds import DestKind, Edge


def routes(walk: LoweredWalk) -> list[Route]:
    rows: dict[tuple[int, str, str], list] = {}
    for h in walk.hops:
        key = (h.call, h.port, h.channel)
        row = rows.setdefault(key, [])
        if h.dest not in row:
            row.append(h.dest)
    out = []
    for (call, port, channel), dests in rows.items():
        cp = walk.calls[call]
        out.append(Route(walk.walk.name, cp.rank, call, cp.node, port, channel, tuple(dests)))
    # hops are produced call by call, port by port: insertion order is already the table order
    return out


def _dst_ranks(h: Hop) -> tuple[int, ...]:
    if h.dest.kind is DestKind.UNTIL:
        return h.dest.ranks
    if h.dest.kind in (DestKind.CALL, DestKind.STREAM) and h.dest.rank is not None:
        return (h.dest.rank,)
    return ()


def transfers(walk: LoweredWalk, shapes: dict[str, Dim] | None = None) -> list[Transfer]:
    """The walk's hops to other ranks; a shape-bucket value counts its largest bucket."""
    shapes = shapes or {}
    seen: dict[tuple, Transfer] = {}
    for h in walk.hops:
        for dst in _dst_ranks(h):
            if dst == h.rank:
                continue
            key = (h.call, h.port, dst, h.edge.kind.value, h.loop)
            if key in seen:
                continue
            seen[key] = Transfer(
                walk=walk.walk.name,
                channel=h.channel,
                src_rank=h.rank,
                dst_rank=dst,
                edge=Edge(h.edge.kind.value),
                per="iteration" if h.loop is not None else "request",
                loop=h.loop,
                nbytes=largest_nbytes(type_spec(h.edge.type), shapes),
                call=h.call,
                port=h.port,
            )
    return sorted(seen.values(), key=lambda t: (t.call, t.port or "", t.dst_rank, t.edge))


def persisted_transfers(
    walks: Iterable[WalkSpec], flows: Iterable[FP.FlowPlan], shapes: dict[str, Dim] | None = None
) -> list[Transfer]:
    """Persisted channels a flow passes to a walk whose readers are on another rank than the
    one that keeps the channel: one row per (reading walk, channel, keeping rank, reading
    rank), sized by the walk input's type. A flow's persisted channels are its own, so only the
    walks of the same flow that persist the channel can be its source."""
    specs = {w.name: w for w in walks}
    seen: dict[tuple, Transfer] = {}
    for f in flows:
        calls = [s for s in _flow_stmts(f.body) if isinstance(s, FP.RunWalkPlan)]
        keepers: dict[str, set[int]] = {}
        for c in calls:
            w = specs.get(c.walk)
            for channel, rank in w.persists if w is not None else ():
                if rank >= 0:
                    keepers.setdefault(channel, set()).add(rank)
        for c in calls:
            w = specs.get(c.walk)
            if w is None:
                continue
            inputs = {i.name: i for i in w.inputs}
            for a in c.args:
                inp = inputs.get(a.param)
                if a.kind != "persisted" or inp is None:
                    continue
                readers = sorted(
                    {d.rank for d in inp.dests if d.kind is DestKind.CALL and d.rank is not None}
                )
                for src in sorted(keepers.get(a.name, ())):
                    for dst in readers:
                        if dst is None or dst == src:
                            continue
                        seen.setdefault(
                            (w.name, a.param, src, dst),
                            Transfer(
                                walk=w.name,
                                channel=a.name,
                                src_rank=src,
                                dst_rank=dst,
                                edge="persisted",
                                per="request",
                                loop=None,
                                nbytes=largest_nbytes(inp.type, shapes or {}),
                                port=a.param,
                            ),
                        )
    return list(seen.values())


def state_transfers(
    walks: Iterable[WalkSpec], kv_bytes: dict[str, int] | None = None
) -> list[Transfer]:
    """The node-state moves of every handoff (`WalkSpec.handoffs`), leader to leader: a
    request's state of the node, of ``kv_bytes[node]`` at most (a kv-cache node whose
    geometry and ``kv_tokens`` are declared, `kv.handoff_bytes`), else of a size only the run
    knows."""
    kv_bytes = kv_bytes or {}
    out = []
    for w in walks:
        for h in w.handoffs:
            if not h.from_ranks or not h.to_ranks or h.from_ranks == h.to_ranks:
                continue
            out.append(
                Transfer(
                    walk=w.name,
                    channel=h.node,
                    src_rank=h.from_ranks[0],
                    dst_rank=h.to_ranks[0],
                    edge="state",
                    per="request",
                    loop=None,
                    nbytes=kv_bytes.get(h.node),
                    port=h.node,
                )
            )
    return out


def _flow_stmts(body: tuple[FP.Stmt, ...]):
    for s in body:
        yield s
        if isinstance(s, FP.ForPlan | FP.RepeatPlan):
            yield from _flow_stmts(s.body)
        elif isinstance(s, FP.MatchPlan | FP.OptionMatchPlan):
            for a in s.arms:
                yield from _flow_stmts(a.body)
        elif isinstance(s, FP.IfPlan):
            yield from _flow_stmts(s.then)
            yield from _flow_stmts(s.else_ or ())
