"""The messages between the conductor, the workers (one per rank) and the client.

Every message is a small frozen dataclass. `to_wire()` turns it into a msgpack-able dict
(``{"t": <class name>, <field>: <value>, ...}``, tuples as lists) and `from_wire()` turns such a
dict back into the message; nothing here ever pickles.

**Tensors are never encoded here.** A *data message* (``DATA`` is true: `Value`, `StreamItem`,
`ClientOut`, `Output`) carries one tensor *handle* in its ``data`` field, which the transport
fills and reads: in one process the handle is the tensor itself (or ``None``); across processes
the transport swaps the tensor for a descriptor (a shared-memory arena slot, a ZeroMQ frame
index) with `with_data` before `to_wire`, and back after `from_wire`. `to_wire` refuses a
message whose ``data`` is still a tensor-like object (anything but None / str / int / float /
bool / bytes / list / dict), so a forgotten swap fails loudly instead of pickling.

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
`StreamAck`             owner -> rank       the item was accepted: the producer may go on
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
`StatePart`             rank -> rank        one named tensor of an exported node state
`StateEnd`              rank -> rank        the exported state is complete (``parts`` parts)
`StateImported`         rank -> conductor   the state arrived and was imported here
`Output`                conductor -> client an emitted value, with its flow and walk
`Finished`              conductor -> client the request ended (ok, or its error)
======================  ==================  ==============================================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from wgc_runtime.contract.spec import Dest

CONDUCTOR = -1
CLIENT = -2

Iters = tuple[tuple[str, int], ...]

_PLAIN = (type(None), str, int, float, bool, bytes, list, dict, tuple)


class Message:
    """Base of every message (see the module docstring)."""

    __slots__ = ()
    DATA: ClassVar[bool] = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": type(self).__name__}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "data":
                if not isinstance(value, _PLAIN):
                    raise TypeError(
                        f"{type(self).__name__}.data holds a {type(value).__name__}: the "
                        "transport must swap tensors for descriptors before to_wire()"
                    )
                out["data"] = value
            elif f.name == "dests":
                out["dests"] = [dataclasses.asdict(d) for d in value]
            else:
                out[f.name] = _plain(value)
        return out

    def with_data(self, data: Any) -> Message:
        """A copy with ``data`` replaced (the transport's handle swap)."""
        return dataclasses.replace(self, data=data)  # type: ignore[type-var]


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _tuple(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuple(x) for x in v)
    return v


def from_wire(d: dict[str, Any]) -> Message:
    """The message a `Message.to_wire` dict describes."""
    cls = MESSAGES.get(d.get("t", ""))
    if cls is None:
        raise ValueError(f"unknown message type {d.get('t')!r}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        if f.name == "data":
            kwargs["data"] = v
        elif f.name == "dests":
            kwargs["dests"] = tuple(Dest(**{**x, "ranks": tuple(x["ranks"])}) for x in v)
        else:
            kwargs[f.name] = _tuple(v)
    return cls(**kwargs)


# ---------------------------------------------------------------- conductor -> rank


@dataclass(frozen=True, slots=True)
class StartWalk(Message):
    """Run this rank's piece of walk instance ``walk_id`` for ``flow`` of ``request``.
    ``options``: the request's option values (defaults included), for `CallContext.options`."""

    request: str
    walk_id: int
    walk: str
    flow: str
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class ForwardPersisted(Message):
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


@dataclass(frozen=True, slots=True)
class StreamDone(Message):
    request: str
    stream: str


@dataclass(frozen=True, slots=True)
class StreamAbandon(Message):
    request: str
    stream: str


@dataclass(frozen=True, slots=True)
class SkipChunk(Message):
    request: str
    stream: str
    index: int


@dataclass(frozen=True, slots=True)
class Release(Message):
    """The request ended (finished, failed or cancelled): drop its state, release its nodes."""

    request: str
    reason: str = "finished"


@dataclass(frozen=True, slots=True)
class ExportState(Message):
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


# ---------------------------------------------------------------- data between ranks


@dataclass(frozen=True, slots=True)
class Value(Message):
    """A value for input ``port`` of call ``call`` (on the receiving rank) of walk instance
    ``walk_id``. ``edge``/``loop`` are the destination's (`Dest.edge`, `Dest.loop`). ``iters``
    tags the iteration the value belongs to: the producer's loop iterations, already adjusted by
    the sender (a loop-carried value names the *next* iteration of its loop; a terminal or
    accumulated value drops the loop it leaves). The receiver keys the value by the iterations
    of its own call's loops that the tag names. ``signal``: a bare signal (no tensor; ``data``
    is None)."""

    DATA: ClassVar[bool] = True
    request: str
    walk_id: int
    walk: str
    call: int
    port: str
    edge: str
    loop: str | None = None
    iters: Iters = ()
    signal: bool = False
    data: Any = None


@dataclass(frozen=True, slots=True)
class Until(Message):
    """The stop value of iteration ``iteration`` of loop ``loop`` (the instance inside
    iterations ``outer`` of its enclosing loops)."""

    request: str
    walk_id: int
    walk: str
    loop: str
    outer: tuple[int, ...]
    iteration: int
    stop: bool


@dataclass(frozen=True, slots=True)
class StreamItem(Message):
    """One item for stream ``stream``; the owner answers `StreamAck` with ``seq`` once the item
    is in the buffer (at once, or after a consumer made room)."""

    DATA: ClassVar[bool] = True
    request: str
    stream: str
    seq: int
    src_rank: int
    data: Any = None


@dataclass(frozen=True, slots=True)
class StreamAck(Message):
    request: str
    stream: str
    seq: int


@dataclass(frozen=True, slots=True)
class StatePart(Message):
    """One named tensor (``key``, from `Node.export_state`) of the state of ``node`` that
    ``src_rank`` exports for walk instance ``walk_id``; a data message like `Value`."""

    DATA: ClassVar[bool] = True
    request: str
    walk_id: int
    node: str
    key: str
    src_rank: int
    data: Any = None


@dataclass(frozen=True, slots=True)
class StateEnd(Message):
    """``src_rank`` sent every part of the exported state: ``parts`` `StatePart` messages (the
    receiver imports once it holds them all, whatever order they arrive in)."""

    request: str
    walk_id: int
    node: str
    src_rank: int
    parts: int


# ---------------------------------------------------------------- rank -> conductor


@dataclass(frozen=True, slots=True)
class WalkDone(Message):
    request: str
    walk_id: int
    walk: str
    rank: int


@dataclass(frozen=True, slots=True)
class StateImported(Message):
    """``rank`` imported the state of ``node`` moved for walk instance ``walk_id``."""

    request: str
    walk_id: int
    node: str
    rank: int


@dataclass(frozen=True, slots=True)
class ChunkReady(Message):
    """Chunk ``index`` of ``stream`` can be taken; ``empty``: it holds no item; ``final``: it is
    the stream's final chunk (known exactly when it becomes ready)."""

    request: str
    stream: str
    index: int
    empty: bool
    final: bool


@dataclass(frozen=True, slots=True)
class ClientOut(Message):
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


@dataclass(frozen=True, slots=True)
class Failed(Message):
    """The request failed. ``kind``: node | output | stream | flow | fail | timeout | deadlock
    | cancelled | internal (the reference interpreter's kinds, plus the runtime's own)."""

    request: str
    kind: str
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    rank: int | None = None


# ---------------------------------------------------------------- conductor -> client


@dataclass(frozen=True, slots=True)
class Output(Message):
    DATA: ClassVar[bool] = True
    request: str
    flow: str
    walk: str
    modality: str
    channel: str
    iters: tuple[int, ...] = ()
    data: Any = None


@dataclass(frozen=True, slots=True)
class Finished(Message):
    """The request ended: ``ok``, or failed with the error fields (as in `Failed`)."""

    request: str
    ok: bool
    kind: str | None = None
    message: str | None = None
    flow: str | None = None
    walk: str | None = None
    node: str | None = None


MESSAGES: dict[str, type[Message]] = {
    c.__name__: c
    for c in (
        StartWalk,
        ForwardPersisted,
        StreamDone,
        StreamAbandon,
        SkipChunk,
        Release,
        ExportState,
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
        Output,
        Finished,
    )
}
