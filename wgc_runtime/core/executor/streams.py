"""Streams: producer values to the owner's buffers, in statement order, with back-pressure.

Producer values go to the owner rank's `StreamBuffer` (one per request and stream). The items of
one walk instance go in statement order, as the interpreter pushes them: a producer instance
pushes once no earlier producer instance of the stream (by call id, loops' iterations in turn:
`PieceIndex.order_key`) is waiting, running or still to come in a loop that has not ended; until
then its push is parked.

**Credits.** On the owner's rank a push is accepted at once while the buffer has room; the
producing call's remaining destinations wait until it is (back-pressure: a full buffer stalls
that call's downstream push, never drops an item). A producer on another rank holds credits per
(request, stream): as many items as the owner's buffer holds (`Dest.credits`). It sends an item
and goes on at once while it has a credit, and waits for one otherwise; the owner gives credits
back as it accepts items, in one `StreamAck` per (request, stream, producer rank) per turn
(`RankExecutor.end_turn`), so a decode step never waits for a round trip. Items in flight to an
owner are bounded by the credits, so memory stays bounded. A walk instance reports `WalkDone`
only once every item it sent is acknowledged: the conductor's `StreamDone` (which follows the
producer walks' `WalkDone`) can never overtake an item still on its way, and the final chunk
is planned after every item.

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
from wgc_runtime.contract.node import DTYPES, CallContext
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


def _push(self: RankExecutor, w: WalkRun, d: Dest, v: Any, cont: Callable[[], None]) -> None:
    req, name = w.req, d.name or ""
    if d.rank is None or d.rank == self.rank:
        if name not in req.expected:
            self._expect(req, name, w.options)
        self._enqueue_item(req, name, (0, self.rank, v, cont))
        return
    key = (name, d.rank)
    credit = req.credits.setdefault(key, max(1, d.credits))
    blocked = req.blocked.get(key)
    if credit > 0 and not blocked:
        self._send_item(w, key, v)
        cont()
    else:
        req.blocked.setdefault(key, deque()).append((w, v, cont))


def _send_item(self: RankExecutor, w: WalkRun, key: tuple[str, int], v: Any) -> None:
    """Spend a credit on one item of ``w`` to the owner ``key[1]``."""
    req = w.req
    req.credits[key] -= 1
    req.in_flight.setdefault(key, deque()).append(w)
    w.unacked += 1
    self._seq += 1
    header = None
    if key not in req.headed:  # the first item to this owner carries the request's options
        req.headed.add(key)
        header = tuple(w.options.items())
    self.outbox(key[1], StreamItem(req.id, key[0], self._seq, self.rank, v, header))


def _on_stream_item(self: RankExecutor, m: StreamItem) -> None:
    req = self._req(m.request)
    if m.options is not None:
        self._expect(req, m.stream, dict(m.options))
    self._enqueue_item(req, m.stream, (m.seq, m.src_rank, m.data, None))


def _expect(self: RankExecutor, req: RequestState, name: str, options: dict[str, Any]) -> None:
    """The first item of stream ``name`` for ``req`` is here: its consumer node on this rank
    learns the request (`Node.expect`), once, before the stream's first chunk."""
    if name in req.expected:
        return
    req.expected.add(name)
    s = self.stream_specs.get(name)
    node_name = s.consumer[0] if s is not None else ""
    node = self.expecting.get(node_name)
    if node is None:
        return
    ctx = CallContext(
        request_id=req.id,
        walk="",
        call=-1,
        node=node_name,
        options=options,
        state=req.node_state.setdefault(node_name, {}),
    )
    try:
        node.expect(ctx)
    except Exception as exc:  # a node's failure fails its request, as in a call
        msg = f"node `{node_name}` failed to prepare for the request: {type(exc).__name__}: {exc}"
        raise RequestAbort(FailKind.NODE, msg, None, node_name) from exc


def _on_stream_ack(self: RankExecutor, m: StreamAck) -> None:
    """``m.count`` items to the owner ``m.rank`` were accepted: their credits come back, their
    walks may report, and pushes waiting for a credit go."""
    req = self.requests.get(m.request)
    if req is None:
        return
    key = (m.stream, m.rank)
    flying = req.in_flight.get(key, deque())
    for _ in range(min(m.count, len(flying))):
        w = flying.popleft()
        w.unacked -= 1
        if w.unacked == 0 and w.done_pending:
            self._walk_done(w)
    req.credits[key] = req.credits.get(key, 0) + m.count
    blocked = req.blocked.get(key)
    try:
        while blocked and req.credits[key] > 0 and req.id in self.requests:
            w, v, cont = blocked.popleft()
            self._send_item(w, key, v)
            cont()
    except RequestAbort as exc:
        self._fail(m.request, exc)


def end_turn(self: RankExecutor) -> None:
    """Send the credits this turn gave back: one `StreamAck` per (request, stream, producer)."""
    acks, self._acks = self._acks, {}
    for (request, stream, src), n in acks.items():
        if request in self.requests:
            self.outbox(src, StreamAck(request, stream, n, self.rank))


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
        _seq, src, item, cont = pending.popleft()
        try:
            buf.push(item)
        except StreamError as exc:
            raise RequestAbort(FailKind.STREAM, str(exc)) from exc
        self.stats.pushed(name, buf.held, buf.capacity)
        if cont is not None:
            cont()
        else:  # a credit back to the producer, with this turn's others (`end_turn`)
            ack = (req.id, name, src)
            self._acks[ack] = self._acks.get(ack, 0) + 1
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


def _push_all(self: RankExecutor, w: WalkRun, pushes: list, finish: Callable[[], None]) -> None:
    # one call's items go in its port order, each after the previous one was accepted
    if not pushes:
        finish()
        return
    (d, v), more = pushes[0], pushes[1:]
    self._push(w, d, v, lambda: self._push_all(w, more, finish))
