"""Constructing a rank's nodes from its `RankSpec`.

Each `NodeSpec` names its ``impl`` (``module:Class``); the class is imported and built with a
`NodeContext`: the node's name, config, the rank's device, engine, KV labels, tensor-parallel
position, and its port types: the node's declared ports (`NodeSpec.inputs` / ``outputs``, every
port, whether or not a call on this rank uses it). A hand-written `NodeSpec` may leave them
out; then they are gathered from every call of the node in the rank's pieces (each port a call
uses carries its declared type), and ports no call on this rank uses are unknown to the node.
The context also hands each node the plan's capture units that contain its calls, so an engine
can build its CUDA-graph runner (or the eager CPU path) from the compiler's capture plan.
"""

from __future__ import annotations

import importlib
from typing import Any

from wgc_runtime.contract.node import Node, NodeContext
from wgc_runtime.contract.spec import NodeSpec, RankSpec


def port_types(rank: RankSpec, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inputs, outputs): port -> `TypeSpec`: the node's declared ports when its `NodeSpec` has
    them, else every port the node's calls use here."""
    spec = rank.node(node)
    if spec is not None and (spec.inputs or spec.outputs):
        return dict(spec.inputs), dict(spec.outputs)
    ins: dict[str, Any] = {}
    outs: dict[str, Any] = {}
    for p in rank.pieces:
        for c in p.calls:
            if c.node != node:
                continue
            for i in c.inputs:
                ins.setdefault(i.port, i.type)
            for o in c.outputs:
                outs.setdefault(o.port, o.type)
    return ins, outs


def node_context(rank: RankSpec, spec: NodeSpec) -> NodeContext:
    ins, outs = port_types(rank, spec.name)
    tp_rank = spec.ranks.index(rank.rank) if rank.rank in spec.ranks else 0
    return NodeContext(
        name=spec.name,
        impl=spec.impl,
        config=dict(spec.config),
        device=rank.device,
        engine=spec.engine,
        labels=spec.labels,
        tp_rank=tp_rank,
        tp_size=spec.tp,
        inputs=ins,
        outputs=outs,
        captures=node_captures(rank, spec.name),
    )


def node_captures(rank: RankSpec, node: str) -> tuple[Any, ...]:
    """The rank's capture units that contain a call of ``node``."""
    out = []
    for cap in rank.captures:
        piece = rank.piece(cap.walk)
        calls = {c.id: c.node for c in piece.calls} if piece is not None else {}
        if any(calls.get(i) == node for i in cap.calls):
            out.append(cap)
    return tuple(out)


def load_node(rank: RankSpec, spec: NodeSpec) -> Node:
    module, _, cls = spec.impl.partition(":")
    if not module or not cls:
        raise ValueError(f"node `{spec.name}`: impl `{spec.impl}` is not `module:Class`")
    return getattr(importlib.import_module(module), cls)(node_context(rank, spec))


def load_rank_nodes(rank: RankSpec) -> dict[str, Node]:
    """Every node the rank hosts, constructed."""
    return {n.name: load_node(rank, n) for n in rank.nodes}
