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

`Handoff` owns the parts of the states arriving here, per (request, walk id, node, source rank),
until they are complete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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
from wgc_runtime.contract.node import Node
from wgc_runtime.core.executor.state import RequestAbort, RequestState
from wgc_runtime.core.post import Post
from wgc_runtime.engines.kv_pool import PoolFull
from wgc_runtime.engines.kv_pools import KV_PART, KvPools

KV_COPY = "kvcopy:"  # the key of a copied label (`CopyKv`): "kvcopy:<label>"

Source = tuple[int, str, int]  # (walk id, node, src rank): one state on its way here


class Handoff:
    """Node states and KV labels moving between groups (see the module docstring)."""

    def __init__(
        self,
        rank: int,
        nodes: Mapping[str, Node],
        kv: KvPools,
        post: Post,
        deliver: Callable[[Message], None],
    ) -> None:
        self.rank = rank
        self.nodes = nodes
        self.kv = kv
        self.post = post
        self.deliver = deliver  # a part this rank sends itself
        # request -> the states arriving: their parts so far, and the count once `StateEnd` said
        self.incoming: dict[str, dict[Source, dict[str, Any]]] = {}
        self.expected: dict[str, dict[Source, int]] = {}

    def holds(self, request: str) -> bool:
        """Whether a state of ``request`` is on its way here."""
        return request in self.incoming

    def drop(self, request: str) -> None:
        """The request ended: the parts received are dropped."""
        self.incoming.pop(request, None)
        self.expected.pop(request, None)

    def targets(self, from_ranks: tuple[int, ...], to_ranks: tuple[int, ...]) -> tuple[int, ...]:
        """Where this rank sends a moved or copied state: with groups of one size, shard k to
        shard k; otherwise the first rank of ``from_ranks`` to every rank of ``to_ranks`` (the
        others send nothing)."""
        if len(from_ranks) == len(to_ranks):
            k = from_ranks.index(self.rank) if self.rank in from_ranks else 0
            return (to_ranks[k],)
        if from_ranks and from_ranks[0] == self.rank:
            return to_ranks
        return ()

    def on_export_state(self, req: RequestState, m: ExportState) -> None:
        """Move the request's state of ``m.node`` to its new group (a plan handoff): its KV
        pages (every label) and what the node's `export_state` makes of the rest."""
        node = self.nodes.get(m.node)
        if node is None:
            raise RequestAbort(
                FailKind.INTERNAL,
                f"rank {self.rank} cannot export the state of `{m.node}`: not loaded",
            )
        kept = req.node_state.pop(m.node, {})
        try:
            state = dict(node.export_state(req.node_id, kept))
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
        for to in self.targets(m.from_ranks, m.to_ranks):
            for key, value in state.items():
                self.send(to, StatePart(m.request, m.walk_id, m.node, key, self.rank, value))
            self.send(to, StateEnd(m.request, m.walk_id, m.node, self.rank, len(state)))

    def on_copy_kv(self, m: CopyKv) -> None:
        """Copy one label of the request's cache of ``m.owner`` to ``m.node``'s pool
        elsewhere."""
        if not self.kv.has(m.owner):
            raise RequestAbort(
                FailKind.INTERNAL, f"rank {self.rank} holds no kv cache of `{m.owner}` to copy"
            )
        kv = self.kv.export_label(m.owner, m.request, m.label)
        for to in self.targets(m.from_ranks, m.to_ranks):
            part = StatePart(m.request, m.walk_id, m.node, f"{KV_COPY}{m.label}", self.rank, kv)
            self.send(to, part)
            self.send(to, StateEnd(m.request, m.walk_id, m.node, self.rank, 1))

    def send(self, to: int, msg: Message) -> None:
        if to == self.rank:
            self.deliver(msg)
        else:
            self.post.send(to, msg)

    def on_state_part(self, req: RequestState, m: StatePart) -> None:
        key = (m.walk_id, m.node, m.src_rank)
        self.incoming.setdefault(req.id, {}).setdefault(key, {})[m.key] = m.data
        self.maybe_import(req, key)

    def on_state_end(self, req: RequestState, m: StateEnd) -> None:
        key = (m.walk_id, m.node, m.src_rank)
        self.incoming.setdefault(req.id, {}).setdefault(key, {})
        self.expected.setdefault(req.id, {})[key] = m.parts
        self.maybe_import(req, key)

    def maybe_import(self, req: RequestState, key: Source) -> None:
        """Import a state once every part of it is here."""
        counts = self.expected.get(req.id)
        parts = counts.get(key) if counts is not None else None
        arriving = self.incoming[req.id]
        if counts is None or parts is None or len(arriving.get(key, ())) < parts:
            return
        state = arriving.pop(key)
        del counts[key]
        if not arriving:
            del self.incoming[req.id]
        if not counts:
            del self.expected[req.id]
        walk_id, name, _ = key
        copies = {k: v for k, v in state.items() if k.startswith(KV_COPY)}
        moved = {k: v for k, v in state.items() if k.startswith(KV_PART)}
        rest = {k: v for k, v in state.items() if k not in copies and k not in moved}
        try:
            for label_key, kv in copies.items():
                self.kv.import_label(name, req.id, label_key.removeprefix(KV_COPY), kv)
            if moved:
                self.kv.import_(name, req.id, moved)
        except (KeyError, ValueError, PoolFull) as exc:  # a full pool fails the request only
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
                node.import_state(req.node_id, rest, req.node_state.setdefault(name, {}))
            except Exception as exc:
                raise RequestAbort(
                    FailKind.NODE,
                    f"node `{name}` failed to import its state on rank {self.rank}: "
                    f"{type(exc).__name__}: {exc}",
                    node=name,
                ) from exc
        self.post.send(CONDUCTOR, StateImported(req.id, walk_id, name, self.rank))
