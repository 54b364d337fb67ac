"""The execution core of one rank: runs its pieces of walks for every request, transport-agnostic.

`RankExecutor` takes messages (`deliver`) and runs ready work (`step`, one batch at a time); what
it sends goes through ``outbox(to, msg)`` (``to``: a rank, or `CONDUCTOR`). Messages to itself
are handled in place. It never blocks and never starts a thread: a transport (or `LocalCluster`)
drives it. Everything it needs per piece was indexed by the compiler (`PieceIndex`).

The executor is composed of parts, each an object that owns its state and is called through its
methods (one module each):

* `Requests` (`requests`): the request table, walk runs, and the ids of ended requests;
* `Values` (`values`): values in, readiness, and the ready queues;
* `Batcher` (`batching`): batches from the ready queues, run in a node's `forward` or a
  captured step (`CapturedSteps`, `captured`, built by `prepare_captures` at worker start); a
  node's ``like`` copies on this rank may run in its batches (`Merger`, `merging`);
* `Router` (`routing`): outputs to their destinations; `Stepper` (`stepping`): a decode loop
  whose one call feeds itself starts its next iteration in place;
* `Loops` (`loops`): iterations, ``until``, speculation, a loop's end;
* `Streams` (`streams`): stream buffers owned here, pushes with credits, statement order;
* `Handoff` (`handoff`): node states moving between groups; `RankSessions` (`sessions`);
* `DirectRuns` (`direct`): plain pieces run as their generated code, on their one value;
* `NodeStats` (`stats`) and `Post` (`state`: where every part sends).

The executor itself dispatches messages to them and keeps the request lifecycle. A `StartWalk`
starts this rank's piece of one walk instance: its top-level units get instances, its
top-level loops start; a piece that needs none (`PieceSpec.needs_start`) starts on the first
value carrying the walk's header (`Value.options`). A piece is done when its top-level units
ran and its top-level loops ended; then `WalkDone` goes to the conductor (unless the plan says
the conductor learns it otherwise, `PieceSpec.reports_done`, or a standing rule started the
walk here, `chunks`). A piece that leaves nothing behind
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
from collections.abc import Callable, Mapping
from typing import Any

from wgc_runtime.contract.kinds import Engine
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
    StreamAcks,
    StreamDone,
    StreamItem,
    StreamItems,
    Until,
    Value,
    WalkDone,
    unpack_acks,
    unpack_items,
)
from wgc_runtime.contract.node import Node
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.core.executor.batching import Batcher
from wgc_runtime.core.executor.captured import CapturedSteps, CaptureReport, Progress
from wgc_runtime.core.executor.direct import DirectRuns
from wgc_runtime.core.executor.handoff import Handoff
from wgc_runtime.core.executor.lanes import Lanes
from wgc_runtime.core.executor.loops import Loops
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.routing import Router
from wgc_runtime.core.executor.sessions import RankSessions, Sessions
from wgc_runtime.core.executor.state import (
    PieceIndex,
    RequestAbort,
    RequestState,
    WalkRun,
)
from wgc_runtime.core.executor.stats import NodeStats
from wgc_runtime.core.executor.stepping import Stepper
from wgc_runtime.core.executor.streams import Streams
from wgc_runtime.core.executor.values import Values
from wgc_runtime.core.post import Outbox, Post
from wgc_runtime.engines.kv_pools import KvPools


class RankExecutor:
    """Runs rank ``rank_spec.rank``'s pieces of walks (see the module docstring)."""

    def __init__(
        self,
        rank_spec: RankSpec,
        nodes: Mapping[str, Node],
        outbox: Outbox,
        max_batch: int = 1,
        device: str = "cpu",
        direct: bool = True,
    ) -> None:
        self.spec = rank_spec
        self.rank = rank = rank_spec.rank
        self.nodes = dict(nodes)
        # one paged pool per kv-cache node (a copy on its owner's group reads the owner's)
        self.kv = KvPools.of_rank(rank_spec, device)
        # the plan's capture list as runners, built by `prepare_captures` at worker start
        self.captured = CapturedSteps(rank_spec, self.nodes, self.kv, device)
        self.sessions = Sessions.of_rank(rank_spec, self.kv)  # kept between requests
        self.stats = NodeStats()  # node calls and stream buffers, for `/metrics`
        self.post = Post(outbox)
        self.engines = engines = {n.name: n.engine for n in rank_spec.nodes}
        self.table = Requests(rank, {p.walk: PieceIndex.of(p) for p in rank_spec.pieces})
        self.requests: dict[str, RequestState] = self.table.by_id
        # the parts (see the module docstring), then the calls back into the lifecycle
        self.values = Values(rank, engines, self.stats)
        # the nodes that prepare for a request ahead of its calls (`Node.expect`, `Node.idle`)
        expecting = {n: x for n, x in self.nodes.items() if _overrides(x, "expect")}
        self._idlers = [x for x in self.nodes.values() if _overrides(x, "idle")]
        self.streams = Streams(rank_spec, expecting, self.post, self.stats, self.table, self.values)
        self.loops = Loops(self.values, self.streams)
        self.stepper = Stepper(rank_spec, self.table, self.values)
        self.lanes = Lanes(self.captured, self.table.live)
        self.stepper.lanes = self.lanes.lanes
        self.router = Router(
            rank, self.post, self.table, self.values, self.loops, self.streams, self.stepper
        )
        self.batcher = Batcher(
            rank_spec,
            self.nodes,
            max_batch,
            engines=engines,
            captured=self.captured,
            kv=self.kv,
            stats=self.stats,
            post=self.post,
            requests=self.table,
            values=self.values,
            streams=self.streams,
            router=self.router,
            fail=self._fail,
            lanes=self.lanes,
        )
        self.handoff = Handoff(rank, self.nodes, self.kv, self.post, self.deliver)
        self.session_runs = RankSessions(self.sessions, engines)
        self.values.connect(self.streams, self.router, self._fail)
        self.streams.connect(self._walk_done, self._fail)
        self.streams.rules.connect(self._begin, self.streams.changed)
        self.loops.connect(self.router, self._walk_done)
        self.router.connect(self._begin)
        # plain pieces as their generated code (`direct`; ``direct`` False: never)
        self.direct = DirectRuns(
            rank_spec,
            self.nodes,
            max_batch,
            enabled=direct,
            table=self.table,
            stats=self.stats,
            router=self.router,
            sessions=self.session_runs,
            done=self._walk_done,
        )
        table, streams, handoff = self.table, self.streams, self.handoff
        self._handlers: dict[type, Callable[[Any], None]] = {
            StartWalk: self._on_start,
            Value: self._on_value if self.direct.entries else self.router.on_value,
            ForwardPersisted: lambda m: self.router.on_forward(table.req(m.request), m),
            Until: self.router.on_until,
            StreamItem: lambda m: streams.on_item(table.req(m.request), m),
            StreamItems: self._on_stream_items,
            StreamAck: self._on_stream_ack,
            StreamAcks: self._on_stream_acks,
            StreamDone: lambda m: streams.on_done(table.req(m.request), m),
            StreamAbandon: lambda m: streams.on_abandon(table.req(m.request), m),
            SkipChunk: lambda m: streams.on_skip(table.req(m.request), m),
            ExportState: lambda m: handoff.on_export_state(table.req(m.request), m),
            CopyKv: handoff.on_copy_kv,
            StatePart: lambda m: handoff.on_state_part(table.req(m.request), m),
            StateEnd: lambda m: handoff.on_state_end(table.req(m.request), m),
            Release: lambda m: self.release(m.request),
            ForgetSession: self.session_runs.on_forget,
        }

    @property
    def outbox(self) -> Outbox:
        """Where the rank's messages go (``outbox(to, msg)``; settable, e.g. to record)."""
        return self.post.send

    @outbox.setter
    def outbox(self, send: Outbox) -> None:
        self.post.send = send

    def prepare_captures(self, progress: Progress | None = None) -> CaptureReport:
        """Build and capture the rank's captured steps (`captured`); once, before serving."""
        report = self.captured.build(progress)
        self.lanes.build(self.stepper.steps, self.batcher)
        return report

    def handles(self, msg: Message) -> bool:
        """Whether ``msg`` is a message this core takes (the host drops the others)."""
        return type(msg) in self._handlers

    def deliver(self, msg: Message) -> None:
        """Take one message (from the conductor, another rank, or this rank)."""
        request: str | None = getattr(msg, "request", None)
        if request in self.table.ended and not isinstance(msg, Release):
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
        ran = self.values.process_dirty()
        return self.batcher.run_next() or ran

    def end_turn(self) -> None:
        """Send the stream credits this turn gave back (`Streams.end_turn`)."""
        self.streams.end_turn()

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
        return bool(self.values.ready or self.values.dirty) or self.lanes.pending()

    def release(self, request: str) -> None:
        """The request ended: drop everything kept for it and release it in every node."""
        req = self.table.end(request)
        self.handoff.drop(request)
        self.lanes.drop()
        if req is None:
            return
        for w in req.walks.values():
            _kill_walk(w)
        self.session_runs.end(req)  # a session keeps the pages and its kv nodes' state
        self.kv.free(request)
        for node in self.nodes.values():
            with contextlib.suppress(Exception):  # one failing release must not stop the others
                node.release(req.node_id)

    # ---------------------------------------------------------------- the request lifecycle

    def _on_stream_items(self, m: StreamItems) -> None:
        for item in unpack_items(m):  # each as if it came alone (an ended request's dropped)
            self.deliver(item)

    def _on_stream_ack(self, m: StreamAck) -> None:
        req = self.requests.get(m.request)
        if req is not None:
            self.streams.on_ack(req, m)

    def _on_stream_acks(self, m: StreamAcks) -> None:
        for ack in unpack_acks(m):  # each as if it came alone (an ended request's dropped)
            self.deliver(ack)

    def _on_value(self, m: Value) -> None:
        """A value: the start of a plain piece runs its generated code (`direct`)."""
        if not self.direct.take(m):
            self.router.on_value(m)

    def _on_start(self, m: StartWalk) -> None:
        w = self.table.walk(m.request, m.walk_id, m.walk)
        if w is not None and not w.started:
            self._begin(w, m.flow, m.options)

    def _begin(self, w: WalkRun, flow: str, options: tuple[tuple[str, Any], ...]) -> None:
        """Start this rank's piece of ``w`` (a `StartWalk`, or the first header value)."""
        w.started, w.flow, w.options = True, flow, dict(options)
        self.session_runs.begin(w)  # a request of a session takes its kept pages
        p = w.piece
        w.top_remaining = len(p.spec.body) + len(p.spec.nested)
        for cid in p.spec.body:
            self.values.add_inst(w, p.units[cid], ())
        for name in p.spec.nested:
            self.loops.start_loop(w, name, ())
        if w.top_remaining == 0:
            self._walk_done(w)

    def _walk_done(self, w: WalkRun) -> None:
        if w.unacked:  # stream items still on their way: report once they are accepted
            w.done_pending = True
            return
        req = w.req
        req.walks.pop(w.walk_id, None)
        req.finished_walks.add(w.walk_id)
        _kill_walk(w)
        spec = w.piece.spec
        if w.chunk_of:  # a standing rule's walk: the rule goes on, nothing to report
            self.streams.rules.walk_done(w)
        elif spec.reports_done:
            self.post.send(CONDUCTOR, WalkDone(req.id, w.walk_id, w.walk, self.rank, w.emitted))
        if not spec.needs_release and self._holds_nothing(req):
            self.table.retire(req)  # no `Release` comes for a piece that leaves nothing
            for name in dict.fromkeys(c.node for c in spec.calls):  # the release rides here
                node = self.nodes.get(name)
                if node is not None:
                    with contextlib.suppress(Exception):
                        node.release(req.node_id)

    def _holds_nothing(self, req: RequestState) -> bool:
        """Whether the request keeps nothing on this rank but finished walk ids: no walk, no
        persisted value, stream, state move, KV page, session, and no node but stateless ones
        called (with nothing in their state dicts)."""
        if self.requests.get(req.id) is not req or req.walks or req.persisted:
            return False
        if req.streams or req.outlets or self.handoff.holds(req.id):
            return False
        if req.id in self.session_runs.of_request:
            return False
        for name, state in req.node_state.items():
            if state or self.engines.get(name) is not Engine.STATELESS:
                return False
        return not any(p.pages_of(req.id) for p in self.kv.pools.values())

    def _fail(self, request: str | None, exc: RequestAbort) -> None:
        if request is None or request in self.table.ended:
            return
        req = self.requests.get(request)
        flow = (
            next((w.flow for w in req.walks.values() if w.walk == exc.walk), None) if req else None
        )
        self.post.send(
            CONDUCTOR,
            Failed(request, exc.kind, exc.message, flow, exc.walk, exc.node, self.rank, exc.cause),
        )
        self.session_runs.drop(request)  # a failed turn's sequence may be half written
        self.release(request)


def _kill_walk(w: WalkRun) -> None:
    for insts in w.waiting.values():
        for inst in insts.values():
            inst.dead = True
    w.waiting.clear()


def _overrides(node: Node, method: str) -> bool:
    return getattr(type(node), method, None) is not getattr(Node, method)
