"""The conductor's core: requests in, flows run, walks started on the ranks, outputs out.

`ConductorCore` is transport-agnostic: it takes requests (`submit`, `cancel`) and messages from
the ranks (`deliver`), and sends through ``outbox(to, msg)`` (``to``: a rank, or `CLIENT` for
`Output` / `Finished`). It never blocks; `tick(now)` enforces the deadlines (`deadlines`).

**Requests.** At most ``max_concurrent_requests`` run at once; the rest wait in FIFO order (with
a deadline). A request runs its flows side by side (`flows`), each flow's walks on the ranks
(`walks`). The request ends when every flow ended (`Finished(ok=True)`), at the first `Fail` or
failure reported by a rank, or on cancel; then `Release` goes to every rank that holds
something of it (`RequestRun.holds`: a rank whose pieces are all plain, `WalkSpec.no_release`,
drops its bookkeeping itself), or to every rank when the request failed or was cancelled (a
value may still be on its way to a rank that never saw the walk).
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import SESSION_OPTION, Request, SimpleRequest
from wgc_runtime.contract.kinds import FailKind, FlowKind
from wgc_runtime.contract.messages import (
    CLIENT,
    ChunkReady,
    ClientOut,
    Failed,
    Finished,
    ForgetSession,
    Message,
    Output,
    Release,
    StateImported,
    WalkDone,
)
from wgc_runtime.contract.spec import StreamSpec
from wgc_runtime.core.conductor import admission, deadlines, flows, walks
from wgc_runtime.core.conductor.replay import replay as _replay
from wgc_runtime.core.conductor.sessions import SessionTable
from wgc_runtime.core.conductor.state import Abort, FlowRun, RequestRun

Outbox = Callable[[int, Message], None]


class ConductorCore:
    """Runs requests' flows over the ranks (see the module docstring)."""

    # the parts of the conductor, one module each (they take `self` like methods)
    # flows
    _runs = staticmethod(flows._runs)
    _generator = staticmethod(flows._generator)
    _resume = flows._resume
    _flow_body_ended = flows._flow_body_ended
    _flow_ended = flows._flow_ended
    _pump_stream_flow = flows._pump_stream_flow
    _send_skip = flows._send_skip
    _stream_owner = flows._stream_owner
    _maybe_done = flows._maybe_done
    _update_streams = flows._update_streams
    # walks
    _launch = walks._launch
    _move_state = walks._move_state
    _options = walks._options
    _deliver_input = walks._deliver_input
    _walk_complete = walks._walk_complete
    # admission by KV pages
    _never_fits = admission._never_fits
    _fits = admission._fits
    _promise = admission._promise
    kv_waits = admission.kv_waits
    # deadlines
    waits = deadlines.waits
    tick = deadlines.tick
    fail_stalled = deadlines.fail_stalled
    # a request run again after a restart
    replay = _replay

    def __init__(
        self,
        spec: ConductorSpec,
        outbox: Outbox,
        *,
        clock: Callable[[], float] = time.monotonic,
        walk_timeout_s: float = 600.0,
        idle_timeout_s: float = 120.0,
        queue_timeout_s: float = 600.0,
        max_concurrent_requests: int | None = None,
    ) -> None:
        self.spec = spec
        self.outbox = outbox
        self.streams: tuple[StreamSpec, ...] = spec.streams
        self.clock = clock
        self.walk_timeout_s = walk_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.queue_timeout_s = queue_timeout_s
        cap = max_concurrent_requests or spec.max_concurrent_requests
        self.max_concurrent = max(1, int(cap))
        self._cap = 0  # the cap while admission is held (`hold_admission`)
        self.walks = {w.name: w for w in spec.walks}
        self.active: dict[str, RequestRun] = {}
        self.queue: OrderedDict[str, tuple[Request, float]] = OrderedDict()
        self._next_walk_id = 0
        self.kv_used: dict[admission.PoolKey, int] = {}  # pages promised per KV pool
        self._on_stream = {f.stream: f.name for f in spec.flows if f.kind is FlowKind.ON_STREAM}
        self._owners = {s.owner for s in spec.streams}  # hold a request's buffers
        self.sessions = SessionTable(spec.kv_cache.max_sessions)

    def submit(self, request_id: str, request: Request) -> None:
        """Start the request now, or queue it behind the admission cap and the KV pools
        (`admission`); refuse it at once when no pool could ever hold it."""
        if request_id in self.active or request_id in self.queue:
            raise ValueError(f"request `{request_id}` is already running")
        never = self._never_fits(request_id)
        if never is not None:
            self._finish_queued(request_id, FailKind.REJECTED, never)
            return
        session = (
            request.option_values().get(SESSION_OPTION)
            if isinstance(request, SimpleRequest)
            else None
        )
        if session is not None:
            why, evicted = self.sessions.begin(str(session), request_id, self.clock())
            for gone in evicted:
                self._forget(gone)
            if why is not None:
                self.outbox(CLIENT, Finished(request_id, False, FailKind.BUSY, why))
                return
        if not self.queue and len(self.active) < self.max_concurrent and self._fits():
            self._start(request_id, request)
        else:
            self.queue[request_id] = (request, self.clock() + self.queue_timeout_s)

    def cancel(self, request_id: str) -> None:
        if request_id in self.queue:
            del self.queue[request_id]
            self._finish_queued(request_id, FailKind.CANCELLED, "request cancelled by the client")
            return
        req = self.active.get(request_id)
        if req is not None:
            self._end(req, Abort(FailKind.CANCELLED, "request cancelled by the client"))

    def hold_admission(self, held: bool) -> None:
        """While held no request starts: new ones queue (with the queue's deadline) and every
        queued one waits; releasing admits the queue again (the host holds admission while a
        rank restarts)."""
        if held:
            self._cap = self._cap or self.max_concurrent
            self.max_concurrent = 0
        elif self._cap:
            self.max_concurrent, self._cap = self._cap, 0
            self._admit()

    def running(self) -> list[str]:
        return list(self.active)

    def queued(self) -> list[str]:
        return list(self.queue)

    def busy(self) -> bool:
        return bool(self.active or self.queue)

    def _start(self, request_id: str, request: Request) -> None:
        req = RequestRun(request_id, request, last_progress=self.clock())
        req.holds |= self._owners
        self.active[request_id] = req
        self._promise(1)
        try:
            for f in self.spec.flows:
                if self._runs(f, request):
                    req.flows[f.name] = FlowRun(f)
            self._update_streams(req)
            for flow in list(req.flows.values()):
                if req.ended:
                    return
                if flow.spec.kind is FlowKind.ON_STREAM:
                    self._pump_stream_flow(req, flow)
                else:
                    flow.gen = self._generator(flow.spec, request)
                    self._resume(req, flow)
            self._maybe_done(req)
        except Abort as exc:
            self._end(req, exc)

    def deliver(self, msg: Message) -> None:
        req = self.active.get(getattr(msg, "request", ""))
        if req is None or req.ended:
            return  # a late message of an ended request
        req.last_progress = self.clock()
        try:
            if isinstance(msg, WalkDone):
                wait = req.walks.get(msg.walk_id)
                if wait is not None:
                    wait.pending.discard(msg.rank)
                    if wait.done():
                        self._walk_complete(req, msg.walk_id)
            elif isinstance(msg, StateImported):
                wait = req.walks.get(msg.walk_id)
                if wait is not None and wait.moving:
                    wait.moving.discard((msg.node, msg.rank))
                    if not wait.moving and wait.start is not None:
                        start, wait.start = wait.start, None
                        start()
            elif isinstance(msg, ClientOut):
                req.emitted = True  # from now on it cannot be replayed (`replay`)
                self.outbox(
                    CLIENT,
                    Output(
                        req.id, msg.flow, msg.walk, msg.modality, msg.channel, msg.iters, msg.data
                    ),
                )
                wait = req.walks.get(msg.walk_id)
                if wait is not None and wait.emits > 0:
                    wait.emits -= 1
                    if wait.done():
                        self._walk_complete(req, msg.walk_id)
            elif isinstance(msg, ChunkReady):
                flow_name = self._on_stream.get(msg.stream)
                flow = req.flows.get(flow_name) if flow_name else None
                if flow is not None and not flow.done:
                    flow.chunks[msg.index] = msg
                    self._pump_stream_flow(req, flow)
            elif isinstance(msg, Failed):
                # a rank that started on a value (no `StartWalk`) may not know the flow
                flow = msg.flow or next(
                    (w.flow.spec.name for w in req.walks.values() if w.spec.name == msg.walk),
                    None,
                )
                raise Abort(msg.kind, msg.message, flow, msg.walk, msg.node, msg.cause)
            else:
                raise TypeError(f"the conductor cannot handle {type(msg).__name__}")
        except Abort as exc:
            self._end(req, exc)

    def _end(self, req: RequestRun, error: Abort | None) -> None:
        if req.ended:
            return
        req.ended = True
        for f in req.flows.values():
            if f.gen is not None:
                with contextlib.suppress(Exception):  # closing must not mask the result
                    f.gen.close()
        self.active.pop(req.id, None)
        self._promise(-1)
        if error is None:
            self.outbox(CLIENT, Finished(req.id, True))
        else:
            self.outbox(
                CLIENT,
                Finished(
                    req.id,
                    False,
                    error.kind,
                    error.message,
                    error.flow,
                    error.walk,
                    error.node,
                    error.cause,
                ),
            )
        reason = "finished" if error is None else error.kind
        ranks = range(self.spec.world_size) if error is not None else sorted(req.holds)
        for r in ranks:
            self.outbox(r, Release(req.id, reason))
        self._session_ended(req.id, ok=error is None)
        self._admit()

    def _admit(self) -> None:
        while self.queue and len(self.active) < self.max_concurrent and self._fits():
            rid, (request, _) = self.queue.popitem(last=False)
            self._start(rid, request)

    def _session_ended(self, rid: str, ok: bool) -> None:
        gone = self.sessions.end(rid, ok, self.clock())
        if gone is not None:
            self._forget(gone)

    def _forget(self, session: str) -> None:
        """Every rank frees ``session``'s kept pages."""
        for r in range(self.spec.world_size):
            self.outbox(r, ForgetSession(session))

    def drop_session(self, session: str) -> bool:
        """Forget ``session`` (`DELETE /v1/sessions/{id}`); whether it was kept."""
        if not self.sessions.drop(session):
            return False
        self._forget(session)
        return True

    def _finish_queued(self, rid: str, kind: FailKind, message: str) -> None:
        self._session_ended(rid, ok=False)
        self.outbox(CLIENT, Finished(rid, False, kind, message))
