"""The route table and the cross-rank transfers, from the hops of every lowered walk.

A route row is one produced (walk, call, port, channel) with all its destinations; rows come in
walk source order, then call id, then the node's port order. Every destination on another rank
is a transfer (an `until` destination is one per rank of the loop other than the producer's);
consumers on one rank share one transfer.
"""

from __future__ import annotations

from wgc.lower.pieces import Hop, LoweredWalk
from wgc.lower.plan import Route, Transfer
from wgc.lower.typespec import spec_nbytes, type_spec
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


def transfers(walk: LoweredWalk) -> list[Transfer]:
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
                nbytes=spec_nbytes(type_spec(h.edge.type)),
                call=h.call,
                port=h.port,
            )
    return sorted(seen.values(), key=lambda t: (t.call, t.port or "", t.dst_rank, t.edge))
