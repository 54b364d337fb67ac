"""Merging: the ready calls of a node's ``like`` copies run in the owner's batch.

A ``like X { label L }`` copy that reads X's pool on this rank (`KvPoolSpec.shared`) is X with
another label: when X's class says its batched `forward` takes such calls
(`Node.serves_copies`) and the copy is an instance of the same class, a batch of X's calls in
a walk also takes the ready calls of the copies in that walk (a CFG branch's passes in a
``par`` block: three calls become one forward over three labels). Each call keeps its own
context (node name, KV handle, state), its own output check and its own routing; the batch's
time is shared among the nodes by their rows in `NodeStats`. A merged batch never runs a
captured step (a captured unit is planned per call).

`Merger` owns the map of merging nodes to their owner and, per ready queue, the queues that
join its batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from wgc_runtime.contract.node import Node, Work
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.core.executor.state import Inst, PieceIndex

if TYPE_CHECKING:
    from wgc_runtime.core.executor.batching import Batcher

Key = tuple[str, int]  # (walk, call id): a queue of ready instances


def owners(rank: RankSpec, nodes: Mapping[str, Node]) -> dict[str, str]:
    """Node -> the node whose batches take its calls: every copy that may merge, and its
    owner, both mapped to the owner (nodes that do not merge are absent)."""
    out: dict[str, str] = {}
    for spec in rank.nodes:
        kv = spec.kv
        if kv is None or kv.owner == spec.name or not kv.shared:
            continue
        copy, owner = nodes.get(spec.name), nodes.get(kv.owner)
        if copy is None or owner is None or type(copy) is not type(owner):
            continue
        if type(owner).serves_copies:
            out[spec.name] = out[kv.owner] = kv.owner
    return out


class Merger:
    """The rank's merging copies (see the module docstring)."""

    def __init__(
        self,
        rank: RankSpec,
        nodes: Mapping[str, Node],
        pieces: dict[str, PieceIndex],
        batcher: Batcher,
    ) -> None:
        self.owner = owners(rank, nodes)  # node -> the node whose batches take its calls
        self.pieces = pieces
        self.batcher = batcher
        self.siblings_of: dict[Key, tuple[Key, ...]] = {}

    def siblings(self, key: Key) -> tuple[Key, ...]:
        """The other queues of ``key``'s walk whose calls merge into the same owner's
        batches."""
        found = self.siblings_of.get(key)
        if found is None:
            walk, cid = key
            piece = self.pieces.get(walk)
            unit = piece.units.get(cid) if piece is not None else None
            owner = self.owner.get(getattr(unit, "node", "") or "")
            found = ()
            if piece is not None and owner is not None:
                found = tuple(
                    (walk, c.id)
                    for c in piece.spec.calls
                    if c.id != cid and self.owner.get(c.node) == owner
                )
            self.siblings_of[key] = found
        return found

    def take_merged(self, key: Key, batch: list[tuple[Inst, Work]]) -> list[tuple[Inst, Work]]:
        """``batch`` (taken from ``key``'s queue) and the ready calls of its siblings'
        queues."""
        ready = self.batcher.ready
        for other in self.siblings(key):
            insts = ready.pop(other, None)
            if not insts:
                continue
            batch = batch + self.batcher.take(insts)
            if insts:
                ready[other] = insts  # the rest waits for a later step
        return batch
