"""Streams: producer values to the owner's buffers, in statement order, with back-pressure.

Producer values go to the owner rank's `StreamBuffer` (one per request and stream). The items of
one walk instance go in statement order, as the interpreter pushes them: a producer instance
pushes once no earlier producer instance of the stream (by call id, loops' iterations in turn:
`PieceIndex.order_key`) is waiting, running or still to come in a loop that has not ended; until
then its push is parked. The producing call's remaining destinations wait until the item is
accepted (back-pressure: a full buffer stalls that call's downstream push, never drops an item).
The owner tells the conductor each time a chunk becomes ready (`ChunkReady`, with its exact
``final`` flag), and takes chunks for consumer calls, for `SkipChunk` and never otherwise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.messages import (
    CONDUCTOR,
    ChunkReady,
    SkipChunk,
    StreamAbandon,
    StreamAck,
    StreamDone,
    StreamItem,
)
from wgc_runtime.contract.node import DTYPES
from wgc_runtime.contract.spec import Dest
from wgc_runtime.core.executor.state import (
    RequestAbort,
    RequestState,
    WalkRun,
)
from wgc_runtime.core.streams import Policy, StreamBuffer, StreamError, chunk_plan

if TYPE_CHECKING:
    from wgc_runtime.core.executor.core import RankExecutor


def _buffer(self: RankExecutor, req: RequestState, name: str) -> StreamBuffer:
    buf = req.streams.get(name)
    if buf is not None:
        return buf
    s = self.stream_specs.get(name)
    if s is None:
        raise RequestAbort(FailKind.INTERNAL, f"rank {self.rank} does not own stream `{name}`")
    item = s.item
    shape = tuple(int(d) for d in item.dims) if item is not None and item.is_static else None
    buf = StreamBuffer(
        Policy.of(s.policy, dict(s.params)),
        s.final,
        s.after_done,
        capacity=s.capacity,
        item_shape=shape,
        dtype=DTYPES.get(item.dtype) if item is not None else None,
        name=name,
    )
    req.streams[name] = buf
    return buf


def _push(self: RankExecutor, req: RequestState, d: Dest, v: Any, cont: Callable[[], None]) -> None:
    name = d.name or ""
    if d.rank is None or d.rank == self.rank:
        self._enqueue_item(req, name, (0, self.rank, v, cont))
        return
    self._seq += 1
    req.acks[self._seq] = cont
    self.outbox(d.rank, StreamItem(req.id, name, self._seq, self.rank, v))


def _on_stream_item(self: RankExecutor, m: StreamItem) -> None:
    self._enqueue_item(self._req(m.request), m.stream, (m.seq, m.src_rank, m.data, None))


def _on_stream_ack(self: RankExecutor, m: StreamAck) -> None:
    req = self.requests.get(m.request)
    cont = req.acks.pop(m.seq, None) if req else None
    if cont is not None:
        try:
            cont()
        except RequestAbort as exc:
            self._fail(m.request, exc)


def _enqueue_item(self: RankExecutor, req: RequestState, name: str, entry) -> None:
    self._buffer(req, name)
    req.stream_pending.setdefault(name, deque()).append(entry)
    self._stream_changed(req, name)


def _stream_changed(self: RankExecutor, req: RequestState, name: str) -> None:
    """Accept waiting items while there is room, tell the conductor about a ready chunk,
    and wake the consumer calls."""
    buf = self._buffer(req, name)
    pending = req.stream_pending.get(name)
    while pending and buf.can_push():
        seq, src, item, cont = pending.popleft()
        try:
            buf.push(item)
        except StreamError as exc:
            raise RequestAbort(FailKind.STREAM, str(exc)) from exc
        if cont is not None:
            cont()
        else:
            self.outbox(src, StreamAck(req.id, name, seq))
        if req.id not in self.requests:
            return
    if not buf.final_taken and buf.ready() and req.notified.get(name, -1) < buf.taken:
        j = buf.taken
        final = False
        if buf.is_done:
            plan = chunk_plan(buf.policy, buf.final, buf.produced)
            final = j < len(plan) and plan[j][2]
        req.notified[name] = j
        self.outbox(CONDUCTOR, ChunkReady(req.id, name, j, buf.next_is_empty(), final))
    self._mark_stream_dirty(req, name)


def _on_stream_done(self: RankExecutor, m: StreamDone) -> None:
    req = self._req(m.request)
    self._buffer(req, m.stream).done()
    self._stream_changed(req, m.stream)


def _on_stream_abandon(self: RankExecutor, m: StreamAbandon) -> None:
    req = self._req(m.request)
    self._buffer(req, m.stream).abandon()
    self._stream_changed(req, m.stream)


def _on_skip_chunk(self: RankExecutor, m: SkipChunk) -> None:
    req = self._req(m.request)
    buf = self._buffer(req, m.stream)
    if buf.taken == m.index and not buf.final_taken and buf.ready():
        buf.take()
    self._stream_changed(req, m.stream)


def _push_blocked(
    self: RankExecutor, w: WalkRun, key: tuple[int, ...], streams: frozenset[str]
) -> bool:
    """Does a push of the call instance at ``key`` have to wait? Items of one stream from
    one walk instance go in statement order (the interpreter's): every producer instance
    before it (waiting, running, or still to come in a loop instance that has not ended)
    pushes first. Earlier iterations of its own loops are done: they complete first."""
    p = w.piece
    for k, st in w.pushing.items():
        if k < key and st & streams:
            return True
    for name in streams:
        for cid in p.producers.get(name, ()):
            for it, inst in w.waiting.get(cid, {}).items():
                if not inst.dead and p.order_key(inst.call, it) < key:
                    return True
    for (name, outer), lr in w.loops.items():
        if lr.ended or not (p.loop_pushes.get(name, frozenset()) & streams):
            continue
        lk = p.loop_key(name, outer)
        if lk < key and key[: len(lk)] != lk:
            return True
    return False


def _unpark(self: RankExecutor, w: WalkRun) -> None:
    """Start the parked pushes nothing earlier holds back any more, in statement order."""
    while w.parked and w.walk_id in w.req.walks:
        w.parked.sort(key=lambda x: x[0])
        for n, (key, streams, start) in enumerate(w.parked):
            if not self._push_blocked(w, key, streams):
                del w.parked[n]
                start()
                break
        else:
            return


def _push_all(
    self: RankExecutor, req: RequestState, pushes: list, finish: Callable[[], None]
) -> None:
    # one call's items go in its port order, each after the previous one was accepted
    if not pushes:
        finish()
        return
    (d, v), more = pushes[0], pushes[1:]
    self._push(req, d, v, lambda: self._push_all(req, more, finish))
