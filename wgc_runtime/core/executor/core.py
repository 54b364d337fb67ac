"""The execution core of one rank: runs its pieces of walks for every request, transport-agnostic.

`RankExecutor` takes messages (`deliver`) and runs ready work (`step`, one batch at a time); what
it sends goes through ``outbox(to, msg)`` (``to``: a rank, or `CONDUCTOR`). Messages to itself
are handled in place. It never blocks and never starts a thread: a transport (or `LocalCluster`)
drives it. Everything it needs per piece was indexed by the compiler (`PieceIndex`).

A `StartWalk` starts this rank's piece of one walk instance: its top-level units get instances,
its top-level loops start (`loops`); a piece that needs none (`PieceSpec.needs_start`) starts
on the first value carrying the walk's header (`Value.options`). Values arrive (`values`);
ready instances are batched and run (`batching`; a call the plan lists as capturable runs in
its captured step, `captured`, built by `prepare_captures` at worker start; a node's ``like``
copies on this rank may run in its batches, `merging`); their outputs are
routed (`routing`, `streams`); loops advance and end (`loops`; a decode loop whose one call
feeds itself starts its next iteration in place, `stepping`); node state moves between
groups on request (`handoff`). A piece is done when its top-level units ran and its top-level
loops ended; then `WalkDone` goes to the conductor (unless the plan says the conductor learns
it otherwise, `PieceSpec.reports_done`). A piece that leaves nothing behind
(`PieceSpec.needs_release`) drops the request's bookkeeping here once done and nothing else of
the request is kept, and releases the request in the nodes it called (the walk id is
remembered, to drop a late message).

**Failures.** A node that raises or returns outputs that do not match its ports fails that
request only (`Failed` to the conductor, with node, walk and message); its state here is dropped
at once. `release` drops a request's state and calls every node's ``release``; late messages for
an ended request are dropped.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

from wgc_runtime.contract.kinds import Engine, FailKind
from wgc_runtime.contract.messages import (
    CONDUCTOR,
    CopyKv,
    ExportState,
    Failed,
    ForgetSession,
    ForwardPersisted,
    Message,
    Release,
    SkipChunk,
    StartWalk,
    StateEnd,
    StatePart,
    StreamAbandon,
    StreamAck,
    StreamDone,
    StreamItem,
    StreamItems,
    Until,
    Value,
    WalkDone,
    unpack_items,
)
from wgc_runtime.contract.node import Node
from wgc_runtime.contract.spec import RankSpec, StreamSpec, Unit
from wgc_runtime.core.executor import (
    batching,
    handoff,
    loops,
    merging,
    routing,
    sessions,
    stepping,
    streams,
    values,
)
from wgc_runtime.core.executor.captured import CapturedSteps, CaptureReport, Progress
from wgc_runtime.core.executor.state import (
    Inst,
    Outbox,
    PieceIndex,
    RequestAbort,
    RequestState,
    WalkRun,
)
from wgc_runtime.core.executor.stats import NodeStats
from wgc_runtime.engines.kv_pools import KvPools

_ENDED_KEEP = 4096  # ended request ids remembered, to drop their late messages


class RankExecutor:
    """Runs rank ``rank_spec.rank``'s pieces of walks (see the module docstring)."""

    # the parts of the executor, one module each (they take `self` like methods)
    # sessions
    _begin_session = sessions.begin_session
    _park_session = sessions.park_session
    _drop_session = sessions.drop_session
    _on_forget_session = sessions.on_forget_session
    # values
    _key = staticmethod(values._key)
    _on_value = values._on_value
    _store = values._store
    _live = values._live
    _on_forward = values._on_forward
    _send_value = values._send_value
    _lookup = staticmethod(values._lookup)
    _input = values._input
    _confirmed = values._confirmed
    _ready_now = values._ready_now
    _process_dirty = values._process_dirty
    _run_sink = values._run_sink
    _mark_stream_dirty = values._mark_stream_dirty
    _consume = staticmethod(values._consume)
    # batching
    _take_batch = batching._take_batch
    _work = batching._work
    _run_batch = batching._run_batch
    _forward = batching._forward
    # routing
    _after_call = routing._after_call
    _route_or_hold = routing._route_or_hold
    _route = routing._route
    _deliver = routing._deliver
    _yield = routing._yield
    _dest = routing._dest
    _sink = routing._sink
    # loops
    _loop_of = loops._loop_of
    _start_loop = loops._start_loop
    _start_iteration = loops._start_iteration
    _unit_done = loops._unit_done
    _iteration_complete = loops._iteration_complete
    _advance = loops._advance
    _on_until = loops._on_until
    _stop = loops._stop
    _release_held = loops._release_held
    _discard_iteration = loops._discard_iteration
    _end_loop = loops._end_loop
    # streams
    _buffer = streams._buffer
    _push = streams._push
    _on_stream_item = streams._on_stream_item
    _on_stream_ack = streams._on_stream_ack
    _enqueue_item = streams._enqueue_item
    _stream_changed = streams._stream_changed
    _on_stream_done = streams._on_stream_done
    _on_stream_abandon = streams._on_stream_abandon
    _on_skip_chunk = streams._on_skip_chunk
    _push_blocked = streams._push_blocked
    _unpark = streams._unpark
    _push_all = streams._push_all
    _send_item = streams._send_item
    _expect = streams._expect
    end_turn = streams.end_turn
    # handoff
    _targets = handoff._targets
    _on_copy_kv = handoff._on_copy_kv
    _on_export_state = handoff._on_export_state
    _send_state = handoff._send_state
    _on_state_part = handoff._on_state_part
    _on_state_end = handoff._on_state_end
    _maybe_import = handoff._maybe_import

    def __init__(
        self,
        rank_spec: RankSpec,
        nodes: Mapping[str, Node],
        outbox: Outbox,
        max_batch: int = 1,
        device: str = "cpu",
    ) -> None:
        self.spec = rank_spec
        self.rank = rank_spec.rank
        self.nodes = dict(nodes)
        # one paged pool per kv-cache node (a copy on its owner's group reads the owner's)
        self.kv = KvPools.of_rank(rank_spec, device)
        # the plan's capture list as runners, built by `prepare_captures` at worker start
        self.captured = CapturedSteps(rank_spec, self.nodes, self.kv, device)
        self.sessions = sessions.Sessions.of_rank(rank_spec, self.kv)  # kept between requests
        self.outbox = outbox
        self.stats = NodeStats()  # node calls and stream buffers, for `/metrics`
        self.max_batch = max(1, int(max_batch))
        self.pieces = {p.walk: PieceIndex.of(p) for p in rank_spec.pieces}
        # copies whose calls run in their owner's batches (`merging`), and per ready queue the
        # queues that join it
        self.merge_owner = merging.owners(rank_spec, self.nodes)
        self._siblings_of: dict[tuple[str, int], tuple[tuple[str, int], ...]] = {}
        # (walk, call) -> how a decode loop's call starts its next iteration in place
        self.self_steps = stepping.self_stepping(rank_spec)
        self.stream_specs: dict[str, StreamSpec] = {s.name: s for s in rank_spec.streams}
        # the nodes that prepare for a request ahead of its calls (`Node.expect`, `Node.idle`)
        self.expecting = {n: x for n, x in self.nodes.items() if _overrides(x, "expect")}
        self._idlers = [x for x in self.nodes.values() if _overrides(x, "idle")]
        self.engines = {n.name: n.engine for n in rank_spec.nodes}
        # every node's declared output types: what its results are checked against
        self.port_types: dict[str, dict[str, Any]] = {
            n.name: dict(n.outputs) for n in rank_spec.nodes
        }
        self.requests: dict[str, RequestState] = {}
        self.ended: OrderedDict[str, None] = OrderedDict()
        # (request, walk id) of walks finished by a request dropped without `Release`
        self._quit: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._dirty: dict[tuple[int, int], WalkRun] = {}  # (id(walk run), unit) -> walk run
        self._ready: OrderedDict[tuple[str, int], deque[Inst]] = OrderedDict()
        self._seq = 0
        self._acks: dict[tuple[str, str, int], int] = {}  # credits to give back (`end_turn`)
        self._handlers: dict[type, Callable[[Any], None]] = {
            StartWalk: self._on_start,
            Value: self._on_value,
            ForwardPersisted: self._on_forward,
            Until: self._on_until,
            StreamItem: self._on_stream_item,
            StreamItems: self._on_stream_items,
            StreamAck: self._on_stream_ack,
            StreamDone: self._on_stream_done,
            StreamAbandon: self._on_stream_abandon,
            SkipChunk: self._on_skip_chunk,
            ExportState: self._on_export_state,
            CopyKv: self._on_copy_kv,
            StatePart: self._on_state_part,
            StateEnd: self._on_state_end,
            Release: lambda m: self.release(m.request),
            ForgetSession: self._on_forget_session,
        }

    def _on_stream_items(self, m: StreamItems) -> None:
        for item in unpack_items(m):  # each as if it came alone (an ended request's dropped)
            self.deliver(item)

    def prepare_captures(self, progress: Progress | None = None) -> CaptureReport:
        """Build and capture the rank's captured steps (`captured`); once, before serving."""
        return self.captured.build(progress)

    def handles(self, msg: Message) -> bool:
        """Whether ``msg`` is a message this core takes (the host drops the others)."""
        return type(msg) in self._handlers

    def deliver(self, msg: Message) -> None:
        """Take one message (from the conductor, another rank, or this rank)."""
        request = getattr(msg, "request", None)
        if request in self.ended and not isinstance(msg, Release):
            return
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"rank {self.rank} cannot handle {type(msg).__name__}")
        try:
            handler(msg)
        except RequestAbort as exc:
            self._fail(request, exc)

    def step(self) -> bool:
        """Run one batch of ready work; False when nothing was ready."""
        ran = self._process_dirty()
        while self._ready:
            key, insts = next(iter(self._ready.items()))
            del self._ready[key]
            batch = self._take_batch(insts)
            if insts:
                self._ready[key] = insts  # the rest waits for the next step (round robin)
            if batch:
                if self.merge_owner:
                    batch = merging.take_merged(self, key, batch)
                self._run_batch(batch)
                return True
        return ran

    def idle(self) -> bool:
        """Let the nodes do a little of their prepared work (`Node.idle`) while the rank has
        nothing to run: the host calls it instead of waiting; True when some was done (the
        host then looks for messages without waiting and calls it again). A node whose
        `idle` raises is not asked again (work ahead is never needed: its calls do the work
        themselves) and the exception goes to the host to report."""
        for node in self._idlers:
            try:
                if node.idle():
                    return True
            except Exception:
                self._idlers.remove(node)
                raise
        return False

    def pending(self) -> bool:
        """Whether the next `step` may find work: call instances queued, or units whose
        readiness changed and was not looked at yet."""
        return bool(self._ready or self._dirty)

    def release(self, request: str) -> None:
        """The request ended: drop everything kept for it and release it in every node."""
        req = self.requests.pop(request, None)
        self._mark_ended(request)
        if req is None:
            return
        for w in req.walks.values():
            self._kill_walk(w)
        if req.session is not None:  # the session keeps the pages and its kv nodes' state
            self._park_session(req)
        self.kv.free(request)
        for node in self.nodes.values():
            with contextlib.suppress(Exception):  # one failing release must not stop the others
                node.release(request)

    def _mark_ended(self, request: str) -> None:
        self.ended[request] = None
        while len(self.ended) > _ENDED_KEEP:
            self.ended.popitem(last=False)

    def _req(self, request: str) -> RequestState:
        req = self.requests.get(request)
        if req is None:
            req = self.requests[request] = RequestState(request)
        return req

    def _walk(self, request: str, walk_id: int, walk: str) -> WalkRun | None:
        if self._quit and (request, walk_id) in self._quit:
            return None  # a late value for a walk of a request dropped here
        req = self._req(request)
        if walk_id in req.finished_walks:
            return None  # a late (speculative) value for a finished walk
        w = req.walks.get(walk_id)
        if w is None:
            piece = self.pieces.get(walk)
            if piece is None:
                raise RequestAbort(
                    FailKind.INTERNAL, f"rank {self.rank} has no piece of walk `{walk}`", walk
                )
            w = req.walks[walk_id] = WalkRun(req, walk_id, walk, piece)
        return w

    def _kill_walk(self, w: WalkRun) -> None:
        for insts in w.waiting.values():
            for inst in insts.values():
                inst.dead = True
        w.waiting.clear()

    def _on_start(self, m: StartWalk) -> None:
        w = self._walk(m.request, m.walk_id, m.walk)
        if w is not None and not w.started:
            self._begin(w, m.flow, m.options)

    def _begin(self, w: WalkRun, flow: str, options: tuple[tuple[str, Any], ...]) -> None:
        """Start this rank's piece of ``w`` (a `StartWalk`, or the first header value)."""
        w.started, w.flow, w.options = True, flow, dict(options)
        self._begin_session(w)  # a request of a session takes its kept pages (`sessions`)
        p = w.piece
        w.top_remaining = len(p.spec.body) + len(p.spec.nested)
        for cid in p.spec.body:
            self._add_inst(w, p.units[cid], ())
        for name in p.spec.nested:
            self._start_loop(w, name, ())
        if w.top_remaining == 0:
            self._walk_done(w)

    def _walk_done(self, w: WalkRun) -> None:
        if w.unacked:  # stream items still on their way: report once they are accepted
            w.done_pending = True
            return
        req = w.req
        req.walks.pop(w.walk_id, None)
        req.finished_walks.add(w.walk_id)
        self._kill_walk(w)
        spec = w.piece.spec
        if spec.reports_done:
            self.outbox(CONDUCTOR, WalkDone(req.id, w.walk_id, w.walk, self.rank))
        if not spec.needs_release and self._holds_nothing(req):
            del self.requests[req.id]  # no `Release` comes for a piece that leaves nothing
            for wid in req.finished_walks:
                self._quit[(req.id, wid)] = None
            while len(self._quit) > _ENDED_KEEP:
                self._quit.popitem(last=False)
            for name in dict.fromkeys(c.node for c in spec.calls):  # the release rides here
                node = self.nodes.get(name)
                if node is not None:
                    with contextlib.suppress(Exception):
                        node.release(req.id)

    def _holds_nothing(self, req: RequestState) -> bool:
        """Whether the request keeps nothing on this rank but finished walk ids: no walk, no
        persisted value, stream, state move, KV page, and no node but stateless ones called
        (with nothing in their state dicts)."""
        if self.requests.get(req.id) is not req or req.walks or req.persisted or req.streams:
            return False
        if req.stream_pending or req.credits or req.blocked or req.in_flight:
            return False
        if req.incoming or req.incoming_parts:
            return False
        for name, state in req.node_state.items():
            if state or self.engines.get(name) is not Engine.STATELESS:
                return False
        return not any(p.pages_of(req.id) for p in self.kv.pools.values())

    def _add_inst(self, w: WalkRun, call: Unit, it: tuple[int, ...]) -> None:
        w.waiting.setdefault(call.id, {})[it] = Inst(w, call, it)
        self._dirty[(id(w), call.id)] = w

    def _fail(self, request: str | None, exc: RequestAbort) -> None:
        if request is None or request in self.ended:
            return
        req = self.requests.get(request)
        flow = (
            next((w.flow for w in req.walks.values() if w.walk == exc.walk), None) if req else None
        )
        self.outbox(
            CONDUCTOR,
            Failed(request, exc.kind, exc.message, flow, exc.walk, exc.node, self.rank, exc.cause),
        )
        self._drop_session(req)  # a failed turn's sequence may be half written
        self.release(request)


def _overrides(node: Node, method: str) -> bool:
    return getattr(type(node), method, None) is not getattr(Node, method)
