"""Merging: the ready calls of a node's ``like`` copies run in the owner's batch.

A ``like X { label L }`` copy that reads X's pool on this rank (`KvPoolSpec.shared`) is X with
another label: when X's class says its batched `forward` takes such calls
(`Node.serves_copies`) and the copy is an instance of the same class, a batch of X's calls in
a walk also takes the ready calls of the copies in that walk (a CFG branch's passes in a
``par`` block: three calls become one forward over three labels). Each call keeps its own
context (node name, KV handle, state), its own output check and its own routing; the batch's
time is shared among the nodes by their rows in `NodeStats`. A merged batch never runs a
captured step (a captured unit is planned per call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc_runtime.contract.node import Node
from wgc_runtime.contract.spec import RankSpec

if TYPE_CHECKING:
    from wgc_runtime.core.executor.core import RankExecutor

Key = tuple[str, int]  # (walk, call id): a queue of ready instances


def owners(rank: RankSpec, nodes: dict[str, Node]) -> dict[str, str]:
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


def _siblings(self: RankExecutor, key: Key) -> tuple[Key, ...]:
    """The other queues of ``key``'s walk whose calls merge into the same owner's batches."""
    found = self._siblings_of.get(key)
    if found is None:
        walk, cid = key
        piece = self.pieces.get(walk)
        unit = piece.units.get(cid) if piece is not None else None
        owner = self.merge_owner.get(getattr(unit, "node", "") or "")
        found = ()
        if piece is not None and owner is not None:
            found = tuple(
                (walk, c.id)
                for c in piece.spec.calls
                if c.id != cid and self.merge_owner.get(c.node) == owner
            )
        self._siblings_of[key] = found
    return found


def take_merged(self: RankExecutor, key: Key, batch: list) -> list:
    """``batch`` (taken from ``key``'s queue) and the ready calls of its siblings' queues."""
    for other in _siblings(self, key):
        insts = self._ready.pop(other, None)
        if not insts:
            continue
        batch = batch + self._take_batch(insts)
        if insts:
            self._ready[other] = insts  # the rest waits for a later step
    return batch
