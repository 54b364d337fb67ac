"""Node-state handoffs between rank groups (prefill on one group, decode on another).

When a kv-cache node runs its walks on several rank groups (the plan's `WalkSpec.handoffs`),
the conductor sends `ExportState` to the group that last ran it for the request: the node's
`export_state` turns the request's state into named tensors, the state is dropped here, and
each tensor travels to the new group as a `StatePart` (a data message, like `Value`), then
`StateEnd` with the count. The receiver imports the state once it holds every part
(`import_state`) and confirms with `StateImported`; the conductor starts the walk after every
confirmation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.messages import (
    CONDUCTOR,
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

if TYPE_CHECKING:
    from wgc_runtime.core.executor.core import RankExecutor


def _on_export_state(self: RankExecutor, m: ExportState) -> None:
    """Move the request's state of ``m.node`` to its new group (a plan handoff)."""
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
    if len(m.from_ranks) == len(m.to_ranks):
        k = m.from_ranks.index(self.rank) if self.rank in m.from_ranks else 0
        targets: tuple[int, ...] = (m.to_ranks[k],)
    elif m.from_ranks and m.from_ranks[0] == self.rank:
        targets = m.to_ranks
    else:
        targets = ()  # another rank of the group sends it; this shard only drops its copy
    for to in targets:
        for key, value in state.items():
            self._send_state(to, StatePart(m.request, m.walk_id, m.node, key, self.rank, value))
        self._send_state(to, StateEnd(m.request, m.walk_id, m.node, self.rank, len(state)))


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
    node = self.nodes.get(name)
    if node is None:
        raise RequestAbort(
            FailKind.INTERNAL,
            f"rank {self.rank} cannot import the state of `{name}`: not loaded",
        )
    try:
        node.import_state(req.id, state, req.node_state.setdefault(name, {}))
    except Exception as exc:
        raise RequestAbort(
            FailKind.NODE,
            f"node `{name}` failed to import its state on rank {self.rank}: "
            f"{type(exc).__name__}: {exc}",
            node=name,
        ) from exc
    self.outbox(CONDUCTOR, StateImported(req.id, walk_id, name, self.rank))
