"""The messages between the conductor and the workers (one per rank), and what the client sees.

Every message is a frozen `msgspec.Struct`, encoded as a msgpack array (``[tag, field, ...]``:
``array_like``, an int tag per class). The transport (`wgc_runtime.host.transport.codec`)
decodes a received frame *into these types*, so a malformed or mistyped message is rejected at
the socket with a `CodecError` naming the bad field: it never reaches a core, and nothing is ever
pickled. The launcher and client protocols (`wgc_runtime.contract.control`) are messages of the
same kind; `INBOX` is what a rank's or the conductor's inbox accepts.

**Tensors.** A *data message* (`Value`, `StreamItem`, `StatePart`, `ClientOut`, `Output`) carries
one value in its ``data`` field: in one process the tensor itself (or ``None``); across processes
the codec's encode hook turns the tensor into a msgpack extension value (inline bytes for a small
tensor, a shared-memory arena descriptor on one host, a zero-copy frame across hosts) and its
decode hook turns it back.

Addresses: a rank is its number; `CONDUCTOR` and `CLIENT` are the other two endpoints. An
``outbox`` is a callable ``outbox(to: int, msg)``.

Identifiers: ``request`` is the client's request id (a str). ``walk_id`` numbers one *walk
instance* (one `RunWalk` of one flow); the conductor assigns it, unique per conductor. Loop
iterations are tagged as ``iters``: ``((loop, i), ...)`` for the producer's enclosing loops,
outermost first (see `Value`).

Who sends what:

======================  ==================  ==============================================
message                 from -> to          meaning
======================  ==================  ==============================================
`StartWalk`             conductor -> rank   run this rank's piece of a walk instance
`Value`                 any -> rank         a value for input ``port`` of call ``call``
`ForwardPersisted`      conductor -> rank   resolve a persisted channel and deliver it as a
                                            walk input to ``dests``
`Until`                 rank -> rank        the stop value of iteration i of a loop
`StreamItem`            rank -> owner rank  one produced stream item
`StreamAck`             owner -> rank       ``count`` items were accepted: credits back
`StreamDone`            conductor -> owner  the stream's producer is done for the request
`StreamAbandon`         conductor -> owner  no consumer is left: accept and drop items
`ChunkReady`            owner -> conductor  chunk ``index`` of a stream can be taken
`SkipChunk`             conductor -> owner  an `on` flow is done with chunk ``index``: take
                                            and drop it unless a call already took it
`WalkDone`              rank -> conductor   this rank finished its piece of a walk instance
`ClientOut`             rank -> conductor   an emitted value
`Failed`                rank -> conductor   the request failed on this rank
`Release`               conductor -> rank   the request ended: drop all its state
`ExportState`           conductor -> rank   export the request's state of a node and send it
                                            to the node's new group (a plan handoff)
`CopyKv`                conductor -> rank   copy one KV label of a node's cache to the pool
                                            of its copy on another group (a plan copy)
`StatePart`             rank -> rank        one named tensor of an exported node state
`StateEnd`              rank -> rank        the exported state is complete (``parts`` parts)
`StateImported`         rank -> conductor   the state arrived and was imported here
`Output`                conductor -> client an emitted value, with its flow and walk
`Finished`              conductor -> client the request ended (ok, or its error)
======================  ==================  ==============================================
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import msgspec
import torch

from wgc_runtime.contract.kinds import Cause, Edge, FailKind
from wgc_runtime.contract.spec import Dest

CONDUCTOR = -1
CLIENT = -2

Iters = tuple[tuple[str, int], ...]


class Message(msgspec.Struct, frozen=True, array_like=True):
    """Base of every message (see the module docstring); ``DATA``: it carries a ``data``
    value that may be a tensor."""

    DATA: ClassVar[bool] = False


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


# ---------------------------------------------------------------- data between ranks


class Value(Message, frozen=True, tag=8):
    """A value for input ``port`` of call ``call`` (on the receiving rank) of walk instance
    ``walk_id``. ``edge``/``loop`` are the destination's (`Dest.edge`, `Dest.loop`). ``iters``
    tags the iteration the value belongs to: the producer's loop iterations, already adjusted by
    the sender (a loop-carried value names the *next* iteration of its loop; a terminal or
    accumulated value drops the loop it leaves). The receiver keys the value by the iterations
    of its own call's loops that the tag names. ``signal``: a bare signal (no tensor; ``data``
    is None). ``options`` (with ``flow``): the walk's *header*, on the first value a sender
    sends to a rank whose piece starts on its first input (`Dest.starts`): the request's
    option values, as `StartWalk` carries them; None on every other value."""

    DATA: ClassVar[bool] = True
    request: str
    walk_id: int
    walk: str
    call: int
    port: str
    edge: Edge
    loop: str | None = None
    iters: Iters = ()
    signal: bool = False
    data: Any = None
    flow: str = ""
    options: tuple[tuple[str, Any], ...] | None = None


class Until(Message, frozen=True, tag=9):
    """The stop value of iteration ``iteration`` of loop ``loop`` (the instance inside
    iterations ``outer`` of its enclosing loops)."""

    request: str
    walk_id: int
    walk: str
    loop: str
    outer: tuple[int, ...]
    iteration: int
    stop: bool


class StreamItem(Message, frozen=True, tag=10):
    """One item for stream ``stream``, sent on a credit; once the item is in the buffer (at once,
    or after a consumer made room) the owner gives the credit back (`StreamAck`). ``seq``
    numbers the sender's items (the order they are accepted in). ``options``: the producing
    walk's header on the first item a rank sends for a (request, stream) — the request's option
    values, as `StartWalk` carries them — so the owner's consumer node learns the request before
    its first chunk (`Node.expect`); None on every other item."""

    DATA: ClassVar[bool] = True
    request: str
    stream: str
    seq: int
    src_rank: int
    data: Any = None
    options: tuple[tuple[str, Any], ...] | None = None


class StreamItems(Message, frozen=True, tag=22):
    """Consecutive `StreamItem`s of one producer rank for one stream, bound for one owner in
    one send, as one message: item ``i`` is ``(requests[i], seqs[i], data[i])``, the items'
    tensors stacked in ``data`` (``[n, *item dims]``: one tensor to encode and decode instead
    of n). A core sends a batch's items for one owner packed (`pack_items`) and takes them
    packed or one by one (`unpack_items`); a transport may pack consecutive items too. A
    message whose lengths disagree does not decode."""

    DATA: ClassVar[bool] = True
    stream: str
    src_rank: int
    requests: tuple[str, ...]
    seqs: tuple[int, ...]
    data: Any = None

    def __post_init__(self) -> None:
        n = len(self.requests)
        shape = getattr(self.data, "shape", ())
        if len(self.seqs) != n or not shape or shape[0] != n:
            raise ValueError(
                f"StreamItems of {n} requests, {len(self.seqs)} seqs and data of shape "
                f"{list(shape)}: one of each per item"
            )


def pack_items(msgs: list[Message], most_bytes: int = 1024) -> list[Message]:
    """``msgs`` (for one peer, in order) with each run of two or more consecutive
    `StreamItem`s of one (stream, producer) without an ``options`` header, whose data are CPU
    tensors of one shape and dtype of at most ``most_bytes`` each, as one `StreamItems`; the
    order of everything else is kept."""
    out: list[Message] = []
    run: list[StreamItem] = []
    run_key: tuple[object, ...] | None = None

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            data = torch.stack([x.data for x in run])
            requests = tuple(x.request for x in run)
            seqs = tuple(x.seq for x in run)
            out.append(StreamItems(run[0].stream, run[0].src_rank, requests, seqs, data))
        run.clear()

    for msg in msgs:
        key = _stack_key(msg, most_bytes)
        if key is None or key != run_key:
            close()
        run_key = key
        if key is None:
            out.append(msg)
        else:
            run.append(msg)  # pyright: ignore[reportArgumentType]
    close()
    return out


def _stack_key(msg: Message, most_bytes: int) -> tuple[object, ...] | None:
    """What items must share to be stacked together (`pack_items`); None: not stackable."""
    if msg.__class__ is not StreamItem or msg.options is not None:  # pyright: ignore
        return None
    d = cast(Any, msg.data)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    if not isinstance(d, torch.Tensor) or not d.is_cpu or d.nbytes > most_bytes:
        return None
    return (msg.stream, msg.src_rank, d.dtype, d.shape)  # pyright: ignore


def unpack_items(msg: StreamItems) -> list[StreamItem]:
    """The `StreamItem`s ``msg`` packs, in order (their data views of its tensor)."""
    rows = msg.data.unbind(0)
    return [
        StreamItem(r, msg.stream, q, msg.src_rank, d)
        for r, q, d in zip(msg.requests, msg.seqs, rows, strict=True)
    ]


class StreamAck(Message, frozen=True, tag=11):
    """The owner ``rank`` of ``stream`` accepted ``count`` more of this producer's items for
    ``request``: that many credits back (one ack per turn, not per item)."""

    request: str
    stream: str
    count: int
    rank: int


class StatePart(Message, frozen=True, tag=12):
    """One named tensor (``key``, from `Node.export_state`) of the state of ``node`` that
    ``src_rank`` exports for walk instance ``walk_id``; a data message like `Value`."""

    DATA: ClassVar[bool] = True
    request: str
    walk_id: int
    node: str
    key: str
    src_rank: int
    data: Any = None


class StateEnd(Message, frozen=True, tag=13):
    """``src_rank`` sent every part of the exported state: ``parts`` `StatePart` messages (the
    receiver imports once it holds them all, whatever order they arrive in)."""

    request: str
    walk_id: int
    node: str
    src_rank: int
    parts: int


# ---------------------------------------------------------------- rank -> conductor


class WalkDone(Message, frozen=True, tag=14):
    request: str
    walk_id: int
    walk: str
    rank: int


class StateImported(Message, frozen=True, tag=15):
    """``rank`` imported the state of ``node`` moved for walk instance ``walk_id``."""

    request: str
    walk_id: int
    node: str
    rank: int


class ChunkReady(Message, frozen=True, tag=16):
    """Chunk ``index`` of ``stream`` can be taken; ``empty``: it holds no item; ``final``: it is
    the stream's final chunk (known exactly when it becomes ready)."""

    request: str
    stream: str
    index: int
    empty: bool
    final: bool


class ClientOut(Message, frozen=True, tag=17):
    """An emitted value (``iters``: the emit's loop iterations, outermost first)."""

    DATA: ClassVar[bool] = True
    request: str
    walk_id: int
    walk: str
    flow: str
    modality: str
    channel: str
    iters: tuple[int, ...] = ()
    data: Any = None


class Failed(Message, frozen=True, tag=18):
    """The request failed (`FailKind` says why; for a node's failure, `Cause` says whose
    fault it is)."""

    request: str
    kind: FailKind
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    rank: int | None = None
    cause: Cause | None = None


# ---------------------------------------------------------------- conductor -> client


class Output(Message, frozen=True, tag=19):
    """An emitted value, as the client sees it (``iters``: the emit's loop iterations)."""

    DATA: ClassVar[bool] = True
    request: str
    flow: str
    walk: str
    modality: str
    channel: str
    iters: tuple[int, ...] = ()
    data: Any = None


class Finished(Message, frozen=True, tag=20):
    """The request ended: ``ok``, or failed with the error fields (as in `Failed`)."""

    request: str
    ok: bool
    kind: FailKind | None = None
    message: str | None = None
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    cause: Cause | None = None


class ForgetSession(Message, frozen=True, tag=23):
    """Free a session's kept pages (evicted, deleted, or its request failed): to every rank."""

    session: str


# what moves between the cores (conductor <-> ranks, rank <-> rank)
CORE = (
    ForgetSession,
    StartWalk,
    ForwardPersisted,
    StreamDone,
    StreamAbandon,
    SkipChunk,
    Release,
    ExportState,
    CopyKv,
    Value,
    Until,
    StreamItem,
    StreamAck,
    StatePart,
    StateEnd,
    WalkDone,
    StateImported,
    ChunkReady,
    ClientOut,
    Failed,
)
