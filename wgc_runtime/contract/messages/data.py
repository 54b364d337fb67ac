"""The data between ranks: values for call inputs (`Value`), loop stop values (`Until`), stream
items and their credits (`StreamItem`, `StreamItems` with `pack_items` / `unpack_items`,
`StreamAck`, `StreamAcks`) and the parts of a moved node state (`StatePart`, `StateEnd`).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import torch

from wgc_runtime.contract.kinds import Edge
from wgc_runtime.contract.messages.base import Iters, Message

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


class StreamAcks(Message, frozen=True, tag=24):
    """`StreamAck`s of one owner ``rank`` for one stream and one producer, for several
    requests in one message (one a turn, not one per request): ``counts[i]`` more of the
    producer's items for ``requests[i]`` were accepted. A message whose lengths disagree does
    not decode."""

    stream: str
    rank: int
    requests: tuple[str, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.requests) != len(self.counts):
            raise ValueError(
                f"StreamAcks of {len(self.requests)} requests and {len(self.counts)} counts"
            )


def unpack_acks(m: StreamAcks) -> list[StreamAck]:
    """A `StreamAcks` as the `StreamAck`s it stands for, in order."""
    return [StreamAck(r, m.stream, n, m.rank) for r, n in zip(m.requests, m.counts, strict=True)]


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
