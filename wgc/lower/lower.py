"""Lowering: a verified `Model` and a `Placement` that passed the rules become a `Plan`.

Steps: assign every call a rank (`assign`); lower each walk into calls, sink units, loop copies
and hops (`pieces`), each rank's piece indexed for the executor (`index`); derive the route table
and the cross-rank transfers (`routes`), stream buffers (`streams`), the node-state handoffs
between rank groups (`handoffs`), the capture plan (`capture`), the memory estimate per rank
(`memory`) and the flows (`flowplan`). The records are the runtime's own
(`wgc_runtime.contract.spec`); the placement's serving settings become its typed `KvCacheSpec`,
`BatchingSpec` and `AttentionSpec`.

Determinism: ranks ascend, walks, loops, nodes, streams and flows keep source order, calls go by
id, ports by the node's declaration order; no set or dict iteration order reaches the plan.
The model must have been built with the effective params (the driver rebuilds it when an
override changes one); ``params`` are those values, recorded in the plan.
"""

from __future__ import annotations

from pathlib import Path

from wgc.diagnostics.diagnostic import Span
from wgc.ir.decls import EngineKind
from wgc.ir.expr import Value
from wgc.ir.model import Model
from wgc.ir.walk import EndKind, Walk
from wgc.lower import capture, control, handoffs, memory, routes, streams
from wgc.lower import kv as kv_plan
from wgc.lower.assign import Assignment
from wgc.lower.flowplan import FlowLowerer, taken_segments
from wgc.lower.params import effective
from wgc.lower.pieces import LoweredWalk, WalkLowerer
from wgc.lower.plan import Plan, Route, SourceFile, Transfer
from wgc.placement.model import Placement
from wgc_runtime.contract.conductor import OptionSpec, WalkSpec
from wgc_runtime.contract.kinds import AttentionKind, CaptureBackend, OnRestart, OptionType
from wgc_runtime.contract.spec import (
    AttentionSpec,
    BatchingSpec,
    CaptureSpec,
    KvCacheSpec,
    PieceSpec,
    RankSpec,
)


def _source(span: Span) -> str:
    return f"{Path(span.file).name}:{span.line}"


def emitted(walk: Walk) -> tuple[str, ...]:
    """The modalities ``walk`` emits (`emit ... as M`), in source order."""
    ends = (e.dst for e in walk.edges)
    return tuple(dict.fromkeys(d.name for d in ends if d.kind is EndKind.CLIENT and d.name))


def settings(placement: Placement) -> tuple[KvCacheSpec, BatchingSpec, AttentionSpec]:
    """The placement's serving settings as the contract's typed records."""
    kv = placement.kv_cache
    buckets = tuple(sorted({b for b in placement.batching.capture if b > 0}))
    return (
        KvCacheSpec(
            page_size=kv.page_size,
            pages=kv.pages,
            dtype=kv.dtype,
            max_sessions=placement.sessions.max_sessions,
            session_pages=placement.sessions.max_pages,
        ),
        BatchingSpec(
            max_batch=placement.batching.max_batch,
            capture=buckets,
            backend=CaptureBackend(placement.batching.backend),
        ),
        AttentionSpec(backend=AttentionKind(placement.attention)),
    )


def lower(
    model: Model,
    placement: Placement,
    params: dict[str, Value] | None = None,
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

    kv_cache, batching, attention = settings(placement)
    shapes = capture.bucket_dims(model)  # shape-bucket dims: one capture entry per bucket
    pieces: dict[int, list[PieceSpec]] = {}
    caps: dict[int, list[CaptureSpec]] = {}
    route_rows: list[Route] = []
    hops: list[Transfer] = []
    walk_specs: list[WalkSpec] = []
    kv = handoffs.kv_groups(model, assign, lowered)
    node_specs = kv_plan.with_pools(model, assign.node_plans(_source), kv_cache)
    pools = {n.name: n.kv for specs in node_specs.values() for n in specs if n.kv is not None}
    shared = {name for name, pool in pools.items() if pool.shared}
    walk_groups = {
        lw.walk.name: {
            c.node: tuple(g.ranks)
            for c in lw.walk.calls
            if (g := assign.group(lw.walk.name, c.node)) is not None
        }
        for lw in lowered
    }
    kv_copies = kv_plan.copies(model, walk_groups, shared)
    stateless = frozenset(n.name for n in model.nodes if n.engine is EngineKind.STATELESS)
    for lw in lowered:
        src = _source(lw.walk.span)
        ranks = lw.ranks()
        ctl = control.walk_control({r: lw.piece(r, src) for r in ranks}, lw.inputs, stateless)
        for r in ranks:
            pieces.setdefault(r, []).append(ctl.pieces[r])
        for c in capture.captures(lw, batching.capture, shapes):
            caps.setdefault(c.rank, []).append(c)
        route_rows.extend(routes.routes(lw))
        name = lw.walk.name
        hops.extend(kv_plan.copy_transfers(name, kv_copies.get(name, ()), pools))
        hops.extend(routes.transfers(lw, shapes))
        walk_specs.append(
            WalkSpec(
                name=name,
                ranks=ranks,
                report=ctl.report,
                inputs=ctl.inputs,
                persists=lw.persists,
                handoffs=handoffs.walk_handoffs(kv, name),
                kv_groups=handoffs.walk_kv_groups(kv, name),
                emits=emitted(lw.walk),
                kv_copies=kv_copies.get(name, ()),
                lazy=ctl.lazy,
                no_release=ctl.no_release,
                done_emits=ctl.done_emits,
                on_restart=OnRestart(placement.on_restart.policy(name)),
                source=src,
            )
        )

    values = effective(model, dict(params or {}))
    placed = assign.placed()
    flows = FlowLowerer(
        placed=frozenset(placed),
        placement=placement.name,
        params=dict(values),
        options={o.name: o.type for o in model.options},
        source=_source,
    )
    flow_plans = tuple(flows.flow(f) for f in model.flows)
    stream_specs = streams.standing_rules(
        streams.stream_plans(model, node_calls, owners, _source), flow_plans, walk_specs
    )
    node_pos = {n.name: i for i, n in enumerate(model.nodes)}
    world = max(
        [placement.world_size]
        + [r + 1 for r in pieces]
        + [r + 1 for r in node_specs]
        + [s.owner + 1 for s in stream_specs]
    )
    rank_specs = []
    for r in range(world):
        nodes = sorted(node_specs.get(r, []), key=lambda n: (node_pos.get(n.name, 0), n.ranks))
        owned = [s for s in stream_specs if s.owner == r]
        rcaps = caps.get(r, [])
        rank_specs.append(
            RankSpec(
                rank=r,
                device=placement.devices[r] if r < len(placement.devices) else "cpu",
                host=placement.host(r),
                model=model.name,
                placement=placement.name,
                world_size=world,
                nodes=tuple(nodes),
                pieces=tuple(pieces.get(r, [])),
                streams=tuple(owned),
                captures=tuple(rcaps),
                memory=memory.estimate(nodes, rcaps, owned),
                kv_cache=kv_cache,
                batching=batching,
                attention=attention,
            )
        )

    hops += routes.persisted_transfers(walk_specs, flow_plans, shapes)
    hops += routes.state_transfers(walk_specs, kv_plan.handoff_bytes(model, pools))
    segments, any_segment = taken_segments(flow_plans)
    return Plan(
        model=model.name,
        placement=placement.name,
        sources=tuple(sources),
        params=values,
        options=tuple(
            OptionSpec(
                name=o.name,
                type=OptionType(o.type),
                default=o.default,
                choices=o.choices,
                default_by=o.default_by,
                by_value=o.by_value,
            )
            for o in model.options
        ),
        ranks=tuple(rank_specs),
        walks=tuple(walk_specs),
        flows=flow_plans,
        segments=segments,
        any_segment=any_segment,
        streams=tuple(stream_specs),
        routes=tuple(route_rows),
        transfers=tuple(hops),
        placed=placed,
        kv_cache=kv_cache,
        batching=batching,
        attention=attention,
        max_concurrent_requests=placement.max_concurrent_requests,
        kv_budgets=kv_plan.budgets(n for r in rank_specs for n in r.nodes),
    )
