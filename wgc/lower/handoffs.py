"""Node-state handoffs: a kv-cache node whose walks run on different rank groups.

Per-walk placement may put one kv-cache node on several groups — prefill on one group and
decode on another (prefill/decode disaggregation, allowed by the placement rules; WG813 keeps
their `tp` equal). The request's state of that node (its KV cache; for toy nodes the dict in
`CallContext.state`) lives where the node last ran for the request, so before a walk starts on
group B the state must move there from group A if the request last ran the node on A. The plan
records, per walk, every such possible move (`Handoff`: node, from group, to group) and the
group each moving node runs on in the walk (`WalkSpec.kv_groups`); the conductor tracks per
request where each node's state lives and orders the moves (docs/plan.md, "Node-state
handoffs").

The unit that moves is one node's per-request state. A `like X { label L }` copy shares X's
cache in a real engine, but the runtime (like the reference interpreter) keeps per-request state
per node name, so a copy's state moves when the copy itself changes group; a copy on another
group than its base reading the labels the base wrote is not a move and is not planned here.
"""

from __future__ import annotations

from wgc.ir.decls import EngineKind
from wgc.ir.model import Model
from wgc.lower.assign import Assignment
from wgc.lower.pieces import LoweredWalk
from wgc_runtime.contract.conductor import Handoff

Groups = dict[str, dict[str, tuple[int, ...]]]  # node -> walk -> group ranks


def kv_groups(model: Model, assign: Assignment, lowered: list[LoweredWalk]) -> Groups:
    """Node -> walk -> the group running it, for every kv-cache node a lowered walk calls, in
    model node order and walk order."""
    out: Groups = {}
    for lw in lowered:
        for c in lw.walk.calls:
            node = model.node(c.node)
            if node is None or node.engine is not EngineKind.KV_CACHE:
                continue
            g = assign.group(lw.walk.name, c.node)
            if g is not None and g.ranks:
                out.setdefault(c.node, {})[lw.walk.name] = tuple(g.ranks)
    pos = {n.name: i for i, n in enumerate(model.nodes)}
    return {n: out[n] for n in sorted(out, key=lambda n: pos.get(n, len(pos)))}


def moving(groups: Groups) -> Groups:
    """Only the nodes that run on more than one group: the ones whose state ever moves."""
    return {n: by_walk for n, by_walk in groups.items() if len(set(by_walk.values())) > 1}


def walk_handoffs(groups: Groups, walk: str) -> tuple[Handoff, ...]:
    """The handoffs before ``walk``: for every moving node it calls, one per other group of the
    node (in the order the groups first appear in walk order)."""
    out = []
    for node, by_walk in moving(groups).items():
        here = by_walk.get(walk)
        if here is None:
            continue
        others = dict.fromkeys(g for g in by_walk.values() if g != here)
        out.extend(Handoff(node=node, from_ranks=g, to_ranks=here) for g in others)
    return tuple(out)


def walk_kv_groups(groups: Groups, walk: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(node, group) for every moving node ``walk`` calls."""
    return tuple(
        (node, by_walk[walk]) for node, by_walk in moving(groups).items() if walk in by_walk
    )
