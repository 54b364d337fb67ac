"""Stream buffers: one per declared stream, owned by the consumer's rank.

The owner is the rank of the consumer node's calls (the rules keep it on one rank; the first in
walk order wins otherwise). Capacity is four full chunks of the policy (k, window, or chunk +
left items), enough for the producer to run ahead without unbounded memory. The producer is done
for a request when every flow that can run a walk calling it has ended: those flows are listed
(every flow, when an extern flow could run anything).

**Standing rules.** A stream whose one consumer flow is an ``on`` flow that only runs one walk
per chunk (no arguments, no branch on runtime values, no ``fail``; a ``placed(NODE)`` test is
folded by then), a walk placed on the owner
rank alone that neither takes inputs, persists, nor moves node state, gets that rule in its
spec (`StreamSpec.chunk_walk`): the owner runs the walk per chunk without the conductor
(`standing_rules`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from wgc.ir.decls import POLICY_PARAMS, PolicyKind, Stream
from wgc.ir.flow import FlowKind, WalkCall, iter_fstmts
from wgc.ir.model import Model
from wgc.lower.flowplan import FlowPlan, IfPlan, RunWalkPlan
from wgc.lower.typespec import type_spec
from wgc_runtime.contract import kinds
from wgc_runtime.contract.conductor import WalkSpec
from wgc_runtime.contract.kinds import FinalMode, Policy
from wgc_runtime.contract.spec import StreamSpec

CHUNKS_BUFFERED = 4


def stream_capacity(s: Stream) -> int:
    """Items the owner's buffer holds (`StreamSpec.capacity`): `CHUNKS_BUFFERED` full chunks.
    A producer on another rank may send that many ahead of acknowledgements (`Dest.credits`)."""
    return CHUNKS_BUFFERED * chunk_items(s)


def chunk_items(s: Stream) -> int:
    """Items in one full chunk of the stream's policy."""
    p = s.policy
    if p.kind is PolicyKind.FIXED:
        n = p.get("k") or 1
    elif p.kind is PolicyKind.SLIDING:
        n = p.get("window") or 1
    else:
        n = (p.get("chunk") or 1) + (p.get("left") or 0)
    return max(1, int(n))


def flows_reaching(model: Model) -> dict[str, tuple[str, ...]]:
    """Walk -> the flows whose body calls it, in flow order (extern flows: every walk)."""
    out: dict[str, list[str]] = {}
    for f in model.flows:
        if f.kind is FlowKind.EXTERN:
            for w in model.walks:
                out.setdefault(w.name, []).append(f.name)
            continue
        if f.body is None:
            continue
        for st in iter_fstmts(f.body):
            if isinstance(st, WalkCall):
                names = out.setdefault(st.walk, [])
                if f.name not in names:
                    names.append(f.name)
    return {w: tuple(fs) for w, fs in out.items()}


def node_calls(model: Model, call_ranks: dict[str, dict[int, int]]) -> dict[str, list]:
    """Node -> [(walk, rank)] of every lowered call of it, in walk then call order."""
    out: dict[str, list[tuple[str, int]]] = {}
    for w in model.walks:
        ranks = call_ranks.get(w.name)
        if ranks is None or model.walk(w.name) is not w:
            continue
        for c in w.calls:
            out.setdefault(c.node, []).append((w.name, ranks[c.id]))
    return out


def stream_owners(model: Model, calls: dict[str, list], fallback) -> dict[str, int]:
    """Stream -> the rank owning its buffer (the consumer's rank)."""
    out: dict[str, int] = {}
    for s in model.streams:
        rank = next((r for _, r in calls.get(s.consumer.node, [])), None)
        if rank is None:
            rank = fallback(s.consumer.node)
        if rank is None:
            rank = next((r for _, r in calls.get(s.producer.node, [])), None)
        out.setdefault(s.name, rank if rank is not None else 0)
    return out


def consumer_flows(
    model: Model, s: Stream, calls: dict[str, list], reaching: dict[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The flows that may take the stream's chunks, in flow order: those that can run a walk
    calling the consumer, and the stream's `on` flows; every flow when one is extern (it may run
    any walk)."""
    if any(f.kind is FlowKind.EXTERN for f in model.flows):
        return tuple(f.name for f in model.flows)
    names = {f for w, _ in calls.get(s.consumer.node, []) for f in reaching.get(w, ())}
    names |= {f.name for f in model.flows if f.kind is FlowKind.ON_STREAM and f.on_stream == s.name}
    return tuple(f.name for f in model.flows if f.name in names)


def stream_plans(
    model: Model, calls: dict[str, list], owners: dict[str, int], source
) -> list[StreamSpec]:
    reaching = flows_reaching(model)
    out = []
    for s in model.streams:
        prod = model.node(s.producer.node)
        port = prod.output(s.producer.port) if prod else None
        producer = calls.get(s.producer.node, [])
        flows = {f for w, _ in producer for f in reaching.get(w, ())}
        params = tuple(
            (name, int(v))
            for name in POLICY_PARAMS[s.policy.kind]
            if (v := s.policy.get(name)) is not None
        )
        out.append(
            StreamSpec(
                name=s.name,
                producer=(s.producer.node, s.producer.port),
                consumer=(s.consumer.node, s.consumer.port),
                producer_ranks=tuple(sorted({r for _, r in producer})),
                owner=owners[s.name],
                policy=Policy(s.policy.kind.value),
                params=params,
                final=FinalMode(s.final.value),
                after_done=s.after_done_continue,
                item=type_spec(port.type if port else None),
                capacity=stream_capacity(s),
                done_after_flows=tuple(f.name for f in model.flows if f.name in flows),
                consumer_flows=consumer_flows(model, s, calls, reaching),
                source=source(s.span),
            )
        )
    return out


def standing_rules(
    specs: Sequence[StreamSpec], flows: Sequence[FlowPlan], walks: Sequence[WalkSpec]
) -> list[StreamSpec]:
    """``specs`` with the standing rule set on every stream that has one (the module
    docstring): its owner rank runs the ``on`` flow's walk for each chunk itself."""
    by_walk = {w.name: w for w in walks}
    flow_of = {f.name: f for f in flows}
    out: list[StreamSpec] = []
    for s in specs:
        f = flow_of.get(s.consumer_flows[0]) if len(s.consumer_flows) == 1 else None
        walk = plain_chunk_walk(f, s.name) if f is not None else None
        ws = by_walk.get(walk) if walk is not None else None
        if f is not None and ws is not None and runs_alone(ws, s.owner):
            s = dataclasses.replace(s, chunk_walk=ws.name, chunk_flow=f.name)
        out.append(s)
    return out


def plain_chunk_walk(f: FlowPlan, stream: str) -> str | None:
    """The walk an ``on stream`` flow runs per chunk when its body is that one launch with no
    arguments; None for any other body (a branch, a loop, a ``fail``, several walks)."""
    if f.kind is not kinds.FlowKind.ON_STREAM or f.stream != stream:
        return None
    body = f.body
    # a condition folded at compile time (`placed(NODE)`) is no branch: its arm is the body
    while len(body) == 1 and isinstance(body[0], IfPlan) and isinstance(body[0].cond, bool):
        body = body[0].then if body[0].cond else (body[0].else_ or ())
    if len(body) != 1:
        return None
    (st,) = body
    return st.walk if isinstance(st, RunWalkPlan) and not st.args else None


def runs_alone(ws: WalkSpec, owner: int) -> bool:
    """Whether walk ``ws`` runs on rank ``owner`` alone, started by a `StartWalk` there, with
    nothing the conductor must do around it: no inputs, persists or node-state moves."""
    return (
        ws.ranks == (owner,)
        and not ws.lazy
        and not (ws.inputs or ws.persists or ws.handoffs or ws.kv_groups or ws.kv_copies)
    )
