"""Lowering: a verified `Model` and a `Placement` that passed the rules become a `Plan`.

Steps: assign every call a rank (`assign`); lower each walk into call plans, loop copies and
hops (`pieces`); derive the route table and the cross-rank transfers (`routes`), stream buffers
(`streams`), the node-state handoffs between rank groups (`handoffs`), the capture plan
(`capture`) and the memory estimate per rank (`memory`).

Determinism: ranks ascend, walks, loops, nodes, streams and flows keep source order, calls go by
id, ports by the node's declaration order; no set or dict iteration order reaches the plan.
The model must have been built with the effective params (`params.rebuild_with_params`);
``params`` here only records the values in the plan.
"""

from __future__ import annotations

from pathlib import Path

from wgc.diagnostics.diagnostic import Span
from wgc.ir.model import Model
from wgc.lower import capture, handoffs, memory, routes, streams
from wgc.lower import params as P
from wgc.lower.assign import Assignment
from wgc.lower.pieces import LoweredWalk, WalkLowerer
from wgc.lower.plan import (
    CaptureEntry,
    PiecePlan,
    Plan,
    RankPlan,
    Route,
    SourceFile,
    Transfer,
    WalkPlan,
)
from wgc.placement.model import Placement


def _source(span: Span) -> str:
    return f"{Path(span.file).name}:{span.line}"


def lower(
    model: Model,
    placement: Placement,
    params: dict | None = None,
    sources: tuple[SourceFile, ...] = (),
) -> Plan:
    assign = Assignment(model, placement)
    call_ranks: dict[str, dict[int, int]] = {}
    for w in model.walks:
        ranks = assign.call_ranks(w)
        if ranks is not None and w.name not in call_ranks:
            call_ranks[w.name] = ranks

    def fallback(node: str) -> int | None:
        groups = assign.by_node.get(node)
        return groups[0][1].ranks[0] if groups and groups[0][1].ranks else None

    node_calls = streams.node_calls(model, call_ranks)
    owners = streams.stream_owners(model, node_calls, fallback)
    lowered: list[LoweredWalk] = [
        WalkLowerer(model, w, call_ranks[w.name], owners, _source).lower()
        for w in model.walks
        if w.name in call_ranks and model.walk(w.name) is w
    ]

    buckets = tuple(sorted({b for b in placement.batching.capture if b > 0}))
    pieces: dict[int, list[PiecePlan]] = {}
    caps: dict[int, list[CaptureEntry]] = {}
    route_rows: list[Route] = []
    hops: list[Transfer] = []
    walk_plans: list[WalkPlan] = []
    kv = handoffs.kv_groups(model, assign, lowered)
    for lw in lowered:
        src = _source(lw.walk.span)
        ranks = lw.ranks()
        for r in ranks:
            pieces.setdefault(r, []).append(lw.piece(r, src))
        for c in capture.captures(lw, buckets):
            caps.setdefault(c.rank, []).append(c)
        route_rows.extend(routes.routes(lw))
        hops.extend(routes.transfers(lw))
        name = lw.walk.name
        walk_plans.append(
            WalkPlan(
                name=name,
                ranks=ranks,
                report=ranks,
                inputs=lw.inputs,
                persists=lw.persists,
                handoffs=handoffs.walk_handoffs(kv, name),
                kv_groups=handoffs.walk_kv_groups(kv, name),
                source=src,
            )
        )

    stream_plans = streams.stream_plans(model, node_calls, owners, _source)
    node_plans = assign.node_plans(_source)
    node_pos = {n.name: i for i, n in enumerate(model.nodes)}
    world = max(
        [placement.world_size]
        + [r + 1 for r in pieces]
        + [r + 1 for r in node_plans]
        + [s.owner + 1 for s in stream_plans]
    )
    rank_plans = []
    for r in range(world):
        nodes = sorted(node_plans.get(r, []), key=lambda n: (node_pos.get(n.name, 0), n.ranks))
        owned = [s for s in stream_plans if s.owner == r]
        rcaps = caps.get(r, [])
        rank_plans.append(
            RankPlan(
                rank=r,
                device=placement.devices[r] if r < len(placement.devices) else "cpu",
                host=placement.host(r),
                nodes=tuple(nodes),
                pieces=tuple(pieces.get(r, [])),
                streams=tuple(owned),
                captures=tuple(rcaps),
                memory=memory.estimate(model, nodes, rcaps, owned, placement.kv_cache),
            )
        )

    values = P.overrides(placement, params)
    kvc = placement.kv_cache
    return Plan(
        model=model.name,
        placement=placement.name,
        sources=tuple(sources),
        params=P.effective(model, values),
        options=tuple((o.name, o.type, o.default) for o in model.options),
        ranks=tuple(rank_plans),
        walks=tuple(walk_plans),
        routes=tuple(route_rows),
        transfers=tuple(hops),
        placed=assign.placed(),
        kv_cache=(("page_size", kvc.page_size), ("pages", kvc.pages), ("dtype", kvc.dtype)),
        batching=(
            ("max_batch", placement.batching.max_batch),
            ("capture", buckets),
        ),
        max_concurrent_requests=placement.max_concurrent_requests,
    )
