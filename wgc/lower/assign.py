"""Which rank runs each call: the placement group holding (walk, node).

Only the walks a flow can run under this placement are lowered (`reach.reachable_walks`: a
branch a `placed(NODE)` condition rules out is dead code, like BAGEL's `image_gen` when the CFG
nodes are placed). A group without `walks` covers every walk; the first group placing a
(walk, node) wins (the rules report overlaps); a node no group names runs on the placement's
default ranks (M* configs: rank 0). A tensor-parallel group runs the call on the whole group;
the call's rank is the group's first rank (the leader that takes part in routing) and the
`NodeSpec` lists the group; a sequence-parallel group (`sp`) is lowered the same way, its `sp`
and the group's `residency` recorded on the `NodeSpec`. A walk with a node placed nowhere is
left out of the plan (the rules report it).
"""

from __future__ import annotations

from wgc.ir.model import Model
from wgc.ir.walk import Walk
from wgc.lower.typespec import type_spec
from wgc.placement.model import Group, Placement
from wgc.placement.reach import default_group, reachable_walks
from wgc_runtime.contract.kinds import Engine
from wgc_runtime.contract.spec import NodeSpec


class Assignment:
    """Group lookups for one (model, placement) pair, indexed once."""

    def __init__(self, model: Model, placement: Placement) -> None:
        self.model = model
        self.placement = placement
        # node -> [(group index, group)], placement order
        self.by_node: dict[str, list[tuple[int, Group]]] = {}
        for gi, g in enumerate(placement.groups):
            for n in g.nodes:
                self.by_node.setdefault(n.name, []).append((gi, g))
        self.reachable = reachable_walks(model, placement)
        self.defaults: dict[str, Group] = {}  # node -> its implicit group, when used

    def group(self, walk: str, node: str) -> Group | None:
        for _, g in self.by_node.get(node, []):
            if g.walks is None or any(w.name == walk for w in g.walks):
                return g
        if node not in self.defaults:
            d = default_group(self.placement, node)
            if d is None:
                return None
            self.defaults[node] = d
        return self.defaults[node]

    def call_ranks(self, walk: Walk) -> dict[int, int] | None:
        """Call id -> rank for every call of ``walk``; None if the walk is not lowered."""
        if walk.name not in self.reachable:
            return None
        out: dict[int, int] = {}
        for c in walk.calls:
            g = self.group(walk.name, c.node)
            if g is None or not g.ranks:
                return None
            out[c.id] = g.ranks[0]
        return out

    def placed(self) -> tuple[str, ...]:
        """Nodes some group names (`placed(NODE)`; defaults do not count), in model order."""
        return tuple(n.name for n in self.model.nodes if n.name in self.by_node)

    def node_plans(self, source) -> dict[int, list[NodeSpec]]:
        """Rank -> the nodes it hosts. Groups with the same node, ranks, tp, sp and residency
        merge their walks. Call after `call_ranks`, so the implicit groups of unnamed nodes in
        use are known."""
        merged: dict[tuple[str, tuple[int, ...], int, int, str], list[str] | None] = {}
        order: list[tuple[str, tuple[int, ...], int, int, str]] = []
        for g in (*self.placement.groups, *self.defaults.values()):
            for n in g.nodes:
                if self.model.node(n.name) is None:
                    continue
                key = (n.name, tuple(g.ranks), g.tp, g.sp, g.residency)
                walks = None if g.walks is None else [w.name for w in g.walks]
                if key not in merged:
                    order.append(key)
                    merged[key] = walks
                else:
                    prev = merged[key]
                    merged[key] = None if prev is None or walks is None else prev + walks
        out: dict[int, list[NodeSpec]] = {}
        for name, ranks, tp, sp, residency in order:
            node = self.model.node(name)
            assert node is not None
            walks = merged[(name, ranks, tp, sp, residency)]
            np = NodeSpec(
                name=name,
                impl=node.impl or "",
                engine=Engine(node.engine.value),
                labels=node.labels,
                config=tuple((k, v) for k, v in node.config),
                ranks=ranks,
                tp=tp,
                sp=sp,
                residency=residency,
                walks=("*",) if walks is None else _walk_order(self.model, walks),
                inputs=tuple((p.name, type_spec(p.type)) for p in node.inputs),
                outputs=tuple((p.name, type_spec(p.type)) for p in node.outputs),
                source=source(node.span),
            )
            for r in sorted(set(ranks)):
                out.setdefault(r, []).append(np)
        return out


def _walk_order(model: Model, names: list[str]) -> tuple[str, ...]:
    """``names`` deduplicated, in the model's walk order (unknown names last, sorted)."""
    pos = {w.name: i for i, w in enumerate(model.walks)}
    uniq = set(names)
    return tuple(sorted(uniq, key=lambda n: (pos.get(n, len(pos)), n)))
