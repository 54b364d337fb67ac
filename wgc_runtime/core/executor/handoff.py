"""Node-state handoffs between rank groups (prefill on one group, decode on another), and KV
label copies (a CFG branch read on its own group).

When a kv-cache node runs its walks on several rank groups (the plan's `WalkSpec.handoffs`),
the conductor sends `ExportState` to the group that last ran it for the request: the node's
`export_state` turns the request's state into named tensors, the state is dropped here, and
each tensor travels to the new group as a `StatePart` (a data message, like `Value`), then
`StateEnd` with the count; a kv-cache node's KV pages go along (one part per label, key
``"kv:<label>"``) and are freed here. The receiver imports the state once it holds every part
(its pages into the node's pool, the rest through `import_state`) and confirms with
`StateImported`; the conductor starts the walk after every confirmation.

A `CopyKv` copies one label of a node's cache from the group holding it to the pool of its
``like X { label L }`` copy on another group, the same way (one part, key ``"kvcopy:<label>"``),
and the source keeps its pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.messages import (
    CONDUCTOR,
    CopyKv,
    ExportState,
    Message,
    StateEnd,
    StateImported,
    StatePart,
)
from wgc_runtime.core.executor.state import (
    RequestAbort,
    RequestState,
)
from wgc_runtime.engines.kv_pool import PoolFull
from wgc_runtime.engines.kv_pools import KV_PART

KV_COPY = "kvcopy:"  # the key of a copied label (`CopyKv`): "kvcopy:<label>"

if TYPE_CHECKING:
    from wgc_runtime.core.executor.core import RankExecutor


def _targets(self: RankExecutor, from_ranks: tuple[int, ...], to_ranks: tuple[int, ...]):
    """Where this rank sends a moved or copied state: with groups of one size, shard k to shard
    k; otherwise the first rank of ``from_ranks`` to every rank of ``to_ranks`` (the others
    send nothing)."""
    if len(from_ranks) == len(to_ranks):
        k = from_ranks.index(self.rank) if self.rank in from_ranks else 0
        return (to_ranks[k],)
    if from_ranks and from_ranks[0] == self.rank:
        return to_ranks
    return ()


def _on_export_state(self: RankExecutor, m: ExportState) -> None:
    """Move the request's state of ``m.node`` to its new group (a plan handoff): its KV pages
    (every label) and what the node's `export_state` makes of the rest."""
    req = self._req(m.request)
    node = self.nodes.get(m.node)
    if node is None:
        raise RequestAbort(
            FailKind.INTERNAL,
            f"rank {self.rank} cannot export the state of `{m.node}`: not loaded",
        )
    kept = req.node_state.pop(m.node, {})
    try:
        state = dict(node.export_state(m.request, kept))
    except Exception as exc:
        raise RequestAbort(
            FailKind.NODE,
            f"node `{m.node}` failed to export its state on rank {self.rank}: "
            f"{type(exc).__name__}: {exc}",
            node=m.node,
        ) from exc
    if any(key.startswith(KV_PART) for key in state):
        raise RequestAbort(
            FailKind.NODE,
            f"node `{m.node}` exported state keys starting with `{KV_PART}`, which are the "
            "runtime's (its KV pages move on their own)",
            node=m.node,
        )
    if self.kv.has(m.node):
        state.update(self.kv.export(m.node, m.request))
    for to in self._targets(m.from_ranks, m.to_ranks):
        for key, value in state.items():
            self._send_state(to, StatePart(m.request, m.walk_id, m.node, key, self.rank, value))
        self._send_state(to, StateEnd(m.request, m.walk_id, m.node, self.rank, len(state)))


def _on_copy_kv(self: RankExecutor, m: CopyKv) -> None:
    """Copy one label of the request's cache of ``m.owner`` to ``m.node``'s pool elsewhere."""
    if not self.kv.has(m.owner):
        raise RequestAbort(
            FailKind.INTERNAL, f"rank {self.rank} holds no kv cache of `{m.owner}` to copy"
        )
    kv = self.kv.export_label(m.owner, m.request, m.label)
    for to in self._targets(m.from_ranks, m.to_ranks):
        part = StatePart(m.request, m.walk_id, m.node, f"{KV_COPY}{m.label}", self.rank, kv)
        self._send_state(to, part)
        self._send_state(to, StateEnd(m.request, m.walk_id, m.node, self.rank, 1))


def _send_state(self: RankExecutor, to: int, msg: Message) -> None:
    if to == self.rank:
        self.deliver(msg)
    else:
        self.outbox(to, msg)


def _on_state_part(self: RankExecutor, m: StatePart) -> None:
    req = self._req(m.request)
    key = (m.walk_id, m.node, m.src_rank)
    req.incoming.setdefault(key, {})[m.key] = m.data
    self._maybe_import(req, key)


def _on_state_end(self: RankExecutor, m: StateEnd) -> None:
    req = self._req(m.request)
    key = (m.walk_id, m.node, m.src_rank)
    req.incoming.setdefault(key, {})
    req.incoming_parts[key] = m.parts
    self._maybe_import(req, key)


def _maybe_import(self: RankExecutor, req: RequestState, key: tuple[int, str, int]) -> None:
    parts = req.incoming_parts.get(key)
    if parts is None or len(req.incoming.get(key, ())) < parts:
        return
    state = req.incoming.pop(key)
    del req.incoming_parts[key]
    walk_id, name, _ = key
    copies = {k: v for k, v in state.items() if k.startswith(KV_COPY)}
    moved = {k: v for k, v in state.items() if k.startswith(KV_PART)}
    rest = {k: v for k, v in state.items() if k not in copies and k not in moved}
    try:
        for label_key, kv in copies.items():
            self.kv.import_label(name, req.id, label_key.removeprefix(KV_COPY), kv)
        if moved:
            self.kv.import_(name, req.id, moved)
    except (KeyError, ValueError, PoolFull) as exc:  # a full pool fails the request, not the rank
        raise RequestAbort(
            FailKind.INTERNAL,
            f"rank {self.rank} cannot take the kv cache of `{name}`: {exc}",
            node=name,
        ) from exc
    if not copies:
        node = self.nodes.get(name)
        if node is None:
            raise RequestAbort(
                FailKind.INTERNAL,
                f"rank {self.rank} cannot import the state of `{name}`: not loaded",
            )
        try:
            node.import_state(req.id, rest, req.node_state.setdefault(name, {}))
        except Exception as exc:
            raise RequestAbort(
                FailKind.NODE,
                f"node `{name}` failed to import its state on rank {self.rank}: "
                f"{type(exc).__name__}: {exc}",
                node=name,
            ) from exc
    self.outbox(CONDUCTOR, StateImported(req.id, walk_id, name, self.rank))
