"""What the conductor tells the ranks: start a piece of a walk (`StartWalk`), deliver a persisted
channel (`ForwardPersisted`), the standing of a stream (`StreamDone`, `StreamAbandon`,
`SkipChunk`), move or copy a request's node state (`ExportState`, `CopyKv`), and drop a request's
or a session's state (`Release`, `ForgetSession`).
"""

from __future__ import annotations

from typing import Any

from wgc_runtime.contract.messages.base import Message
from wgc_runtime.contract.spec import Dest

# ---------------------------------------------------------------- conductor -> rank


class StartWalk(Message, frozen=True, tag=1):
    """Run this rank's piece of walk instance ``walk_id`` for ``flow`` of ``request``.
    ``options``: the request's option values (defaults included), for `CallContext.options`."""

    request: str
    walk_id: int
    walk: str
    flow: str
    options: tuple[tuple[str, Any], ...] = ()


class ForwardPersisted(Message, frozen=True, tag=2):
    """Walk input ``input`` of instance ``walk_id`` is channel ``name`` that ``flow`` persisted on
    this rank: deliver it to ``dests`` (the input's `WalkInputSpec.dests`: calls on any rank,
    the client, persists on this rank). ``ack``: this rank has no piece of the walk, so it
    answers `WalkDone` once it delivered (the walk is not done before its emits are sent)."""

    request: str
    walk_id: int
    walk: str
    flow: str
    input: str
    name: str
    dests: tuple[Dest, ...] = ()
    ack: bool = False


class StreamDone(Message, frozen=True, tag=3):
    request: str
    stream: str


class StreamAbandon(Message, frozen=True, tag=4):
    request: str
    stream: str


class SkipChunk(Message, frozen=True, tag=5):
    request: str
    stream: str
    index: int


class Release(Message, frozen=True, tag=6):
    """The request ended (finished, failed or cancelled): drop its state, release its nodes."""

    request: str
    reason: str = "finished"


class ExportState(Message, frozen=True, tag=7):
    """Before walk instance ``walk_id`` starts, the request's state of ``node`` must move from
    ``from_ranks`` (this rank is one of them) to ``to_ranks`` (`WalkSpec.handoffs`). Export it
    (`Node.export_state`), drop it here, and send it: with groups of one size, the rank at
    position k of ``from_ranks`` sends to position k of ``to_ranks``; otherwise the first rank
    of ``from_ranks`` sends to every rank of ``to_ranks`` and the others only drop theirs."""

    request: str
    walk_id: int
    node: str
    from_ranks: tuple[int, ...]
    to_ranks: tuple[int, ...]


class CopyKv(Message, frozen=True, tag=21):
    """Before walk instance ``walk_id`` starts, label ``label`` of the request's cache of node
    ``owner`` (held on ``from_ranks``; this rank is one of them) goes to the pool of node
    ``node`` on ``to_ranks`` (`WalkSpec.kv_copies`). It travels as one `StatePart` (key
    ``"kvcopy:<label>"``) and a `StateEnd`, like a handoff; the source keeps its pages."""

    request: str
    walk_id: int
    owner: str
    label: str
    node: str
    from_ranks: tuple[int, ...]
    to_ranks: tuple[int, ...]


class ForgetSession(Message, frozen=True, tag=23):
    """Free a session's kept pages (evicted, deleted, or its request failed): to every rank."""

    session: str
