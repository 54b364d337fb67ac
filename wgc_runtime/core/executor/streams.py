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
back as it accepts items, one message per (stream, producer rank) per turn for every request
whose items it accepted (`StreamAcks`, `StreamAck` for one: `Streams.end_turn`), so a decode
step never waits for a round trip. Items in flight to an owner are bounded by the credits, so
memory stays bounded. A walk instance reports `WalkDone`
only once every item it sent is acknowledged: the conductor's `StreamDone` (which follows the
producer walks' `WalkDone`) can never overtake an item still on its way, and the final chunk
is planned after every item.

The owner tells the conductor each time a chunk becomes ready (`ChunkReady`, with its exact
``final`` flag), and takes chunks for consumer calls, for `SkipChunk` and never otherwise; a
stream with a standing rule runs its flow's walk per chunk here instead (`chunks.ChunkRules`).

`Streams` owns the rank's stream specs, the consumer nodes that prepare ahead (`Node.expect`),
the item sequence and the credits to give back this turn; per request, each stream owned here
is an `Inlet` and each (stream, owner rank) pushed to an `Outlet` (`state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.messages import (
    CONDUCTOR,
    ChunkReady,
    SkipChunk,
    StreamAbandon,
    StreamAck,
    StreamAcks,
    StreamDone,
    StreamItem,
)
from wgc_runtime.contract.node import DTYPES, CallContext, Node
from wgc_runtime.contract.spec import Dest, RankSpec, StreamSpec
from wgc_runtime.core.executor.chunks import ChunkRules
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.state import (
    Inlet,
    Outlet,
    RequestAbort,
    RequestState,
    WalkRun,
)
from wgc_runtime.core.executor.stats import NodeStats
from wgc_runtime.core.post import Post
from wgc_runtime.core.streams import Policy, StreamBuffer, StreamError, chunk_plan

if TYPE_CHECKING:
    from wgc_runtime.core.executor.values import Fail, Values

Cont = Callable[[], None]
Push = tuple[Dest, Any]
Parked = tuple[tuple[int, ...], frozenset[str], Cont]


class Streams:
    """The rank's streams, both sides (see the module docstring)."""

    walk_done: Callable[[WalkRun], None]
    fail: Fail

    def __init__(
        self,
        rank_spec: RankSpec,
        expecting: Mapping[str, Node],
        post: Post,
        stats: NodeStats,
        requests: Requests,
        values: Values,
    ) -> None:
        self.rank = rank_spec.rank
        self.specs: dict[str, StreamSpec] = {s.name: s for s in rank_spec.streams}
        self.expecting = expecting  # consumer nodes that prepare for a request ahead
        self.post = post
        self.stats = stats
        self.requests = requests
        self.values = values
        self.seq = 0
        self.acks: dict[tuple[str, str, int], int] = {}  # credits to give back (`end_turn`)
        self.rules = ChunkRules(self.specs, requests, post)

    def connect(self, walk_done: Callable[[WalkRun], None], fail: Fail) -> None:
        """What an acknowledged item may finish (its walk run's report), and failing."""
        self.walk_done, self.fail = walk_done, fail

    # ---------------------------------------------------------------- owner side

    def inlet(self, req: RequestState, name: str) -> Inlet:
        """The request's buffer of stream ``name`` (owned here), made on first use."""
        inlet = req.streams.get(name)
        if inlet is not None:
            return inlet
        s = self.specs.get(name)
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
        inlet = req.streams[name] = Inlet(buf)
        return inlet

    def on_item(self, req: RequestState, m: StreamItem) -> None:
        if m.options is not None:
            self.expect(req, m.stream, dict(m.options))
        self.enqueue(req, m.stream, (m.seq, m.src_rank, m.data, None))

    def expect(self, req: RequestState, name: str, options: dict[str, Any]) -> None:
        """The first item of stream ``name`` for ``req`` is here: its consumer node on this rank
        learns the request (`Node.expect`), once, before the stream's first chunk."""
        inlet = self.inlet(req, name)
        if inlet.expected:
            return
        inlet.expected, inlet.options = True, tuple(options.items())
        s = self.specs.get(name)
        node_name = s.consumer[0] if s is not None else ""
        node = self.expecting.get(node_name)
        if node is None:
            return
        ctx = CallContext(
            request_id=req.node_id,
            walk="",
            call=-1,
            node=node_name,
            options=options,
            state=req.node_state.setdefault(node_name, {}),
        )
        try:
            node.expect(ctx)
        except Exception as exc:  # a node's failure fails its request, as in a call
            msg = (
                f"node `{node_name}` failed to prepare for the request: {type(exc).__name__}: {exc}"
            )
            raise RequestAbort(FailKind.NODE, msg, None, node_name) from exc

    def enqueue(
        self, req: RequestState, name: str, entry: tuple[int, int, Any, Cont | None]
    ) -> None:
        self.inlet(req, name).pending.append(entry)
        self.changed(req, name)

    def changed(self, req: RequestState, name: str) -> None:
        """Accept waiting items while there is room, tell the conductor about a ready chunk,
        and wake the consumer calls."""
        inlet = self.inlet(req, name)
        buf, pending = inlet.buf, inlet.pending
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
                self.acks[ack] = self.acks.get(ack, 0) + 1
            if req.id not in self.requests.by_id:
                return
        if (
            not buf.final_taken
            and buf.ready()
            and inlet.notified < buf.taken
            and not inlet.chunk_running
        ):
            j = buf.taken
            final = False
            if buf.is_done:
                plan = chunk_plan(buf.policy, buf.final, buf.produced)
                final = j < len(plan) and plan[j][2]
            inlet.notified = j
            empty = buf.next_is_empty()
            if not self.rules.ready(req, name, inlet, j, empty, final):
                self.post.send(CONDUCTOR, ChunkReady(req.id, name, j, empty, final))
        self.values.mark_stream(req, name)

    def on_done(self, req: RequestState, m: StreamDone) -> None:
        self.inlet(req, m.stream).buf.done()
        self.changed(req, m.stream)

    def on_abandon(self, req: RequestState, m: StreamAbandon) -> None:
        self.inlet(req, m.stream).buf.abandon()
        self.changed(req, m.stream)

    def on_skip(self, req: RequestState, m: SkipChunk) -> None:
        buf = self.inlet(req, m.stream).buf
        if buf.taken == m.index and not buf.final_taken and buf.ready():
            buf.take()
        self.changed(req, m.stream)

    def end_turn(self) -> None:
        """Send the credits this turn gave back: per (stream, producer), one `StreamAck` for
        one request, one `StreamAcks` for several."""
        acks, self.acks = self.acks, {}
        live = self.requests.by_id
        by: dict[tuple[str, int], tuple[list[str], list[int]]] = {}
        for (request, stream, src), n in acks.items():
            if request in live:
                rs, ns = by.setdefault((stream, src), ([], []))
                rs.append(request)
                ns.append(n)
        for (stream, src), (rs, ns) in by.items():
            if len(rs) == 1:
                self.post.send(src, StreamAck(rs[0], stream, ns[0], self.rank))
            else:
                self.post.send(src, StreamAcks(stream, self.rank, tuple(rs), tuple(ns)))

    # ---------------------------------------------------------------- producer side

    def push(self, w: WalkRun, d: Dest, v: Any, cont: Cont) -> None:
        """Push one item of ``w`` to stream ``d``; ``cont`` once it is accepted (here) or
        sent on a credit (to another rank)."""
        req, name = w.req, d.name or ""
        if d.rank is None or d.rank == self.rank:
            inlet = req.streams.get(name)
            if inlet is None or not inlet.expected:
                self.expect(req, name, w.options)
            self.enqueue(req, name, (0, self.rank, v, cont))
            return
        key = (name, d.rank)
        out = req.outlets.get(key)
        if out is None:
            out = req.outlets[key] = Outlet(max(1, d.credits))
        if out.credits > 0 and not out.blocked:
            self.send_item(w, key, out, v)
            cont()
        else:
            out.blocked.append((w, v, cont))

    def send_now(self, w: WalkRun, d: Dest, v: Any) -> bool:
        """`push` of one item of ``w`` to a stream owned by another rank when a credit is at
        hand and nothing waits before it: sent, True (the caller goes on as ``cont`` would);
        else False and nothing changed (the caller pushes as usual)."""
        if d.rank is None or d.rank == self.rank:
            return False
        out = w.req.outlets.get((d.name or "", d.rank))
        if out is None or out.credits <= 0 or out.blocked:
            return False
        self.send_item(w, (d.name or "", d.rank), out, v)
        return True

    def send_item(self, w: WalkRun, key: tuple[str, int], out: Outlet, v: Any) -> None:
        """Spend a credit on one item of ``w`` to the owner ``key[1]``."""
        out.credits -= 1
        out.in_flight.append(w)
        w.unacked += 1
        self.seq += 1
        header = None
        if not out.headed:  # the first item to this owner carries the request's options
            out.headed = True
            header = tuple(w.options.items())
        self.post.send(key[1], StreamItem(w.req.id, key[0], self.seq, self.rank, v, header))

    def on_ack(self, req: RequestState, m: StreamAck) -> None:
        """``m.count`` items to the owner ``m.rank`` were accepted: their credits come back,
        their walks may report, and pushes waiting for a credit go."""
        key = (m.stream, m.rank)
        out = req.outlets.get(key)
        if out is None:
            out = req.outlets[key] = Outlet(0)
        flying = out.in_flight
        for _ in range(min(m.count, len(flying))):
            w = flying.popleft()
            w.unacked -= 1
            if w.unacked == 0 and w.done_pending:
                self.walk_done(w)
        out.credits += m.count
        blocked = out.blocked
        try:
            while blocked and out.credits > 0 and req.id in self.requests.by_id:
                w, v, cont = blocked.popleft()
                self.send_item(w, key, out, v)
                cont()
        except RequestAbort as exc:
            self.fail(m.request, exc)

    def push_all(self, w: WalkRun, pushes: list[Push], finish: Cont) -> None:
        """One call's items, in its port order, each after the previous one was accepted."""
        if not pushes:
            finish()
            return
        (d, v), more = pushes[0], pushes[1:]
        self.push(w, d, v, lambda: self.push_all(w, more, finish))

    # ---------------------------------------------------------------- statement order

    def push_blocked(self, w: WalkRun, key: tuple[int, ...], streams: frozenset[str]) -> bool:
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

    def unpark(self, w: WalkRun) -> None:
        """Start the parked pushes nothing earlier holds back any more, in statement order."""
        while w.parked and w.walk_id in w.req.walks:
            w.parked.sort(key=lambda x: x[0])
            for n, (key, streams, start) in enumerate(w.parked):
                if not self.push_blocked(w, key, streams):
                    del w.parked[n]
                    start()
                    break
            else:
                return
