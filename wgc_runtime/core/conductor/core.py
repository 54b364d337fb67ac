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

**Parts.** The conductor is composed of objects that own their state, one module each:
`Admission` (the queue, the cap, the pages promised), `Flows` (flow bodies and stream
bookkeeping), `Walks` (walk instances on the ranks), `Deadlines` (timeouts, deadlock),
`SessionTable` (`sessions`); per request a `RequestRun` (`state`). They send through one
`Post`; the core keeps the request table and a request's start and end.

**Outputs.** A rank sends an emit to the conductor (`ClientOut`), which passes it on as
`Output` (checked against what a replay's client has, `replay`), unless the request is *routed*
(`wgc_runtime.contract.route`: its id says which client): then the rank sends it to the
client itself and the conductor only learns how many (`Emitted`, `WalkDone.emits`,
`ChunksDone.emits`), which `Finished.outputs` tells the client; an `Output` a rank could not
deliver itself comes here and is passed on as it is.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import SESSION_OPTION, Request, SimpleRequest
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.messages import (
    CLIENT,
    ChunkReady,
    ChunksDone,
    ClientOut,
    Emitted,
    Failed,
    Finished,
    ForgetSession,
    Message,
    Output,
    Release,
    StateImported,
    WalkDone,
)
from wgc_runtime.core.conductor.admission import Admission, PoolKey
from wgc_runtime.core.conductor.deadlines import Deadlines
from wgc_runtime.core.conductor.flows import Flows
from wgc_runtime.core.conductor.replay import (
    Delivered,
    guard_output,
    inherit,
    may_replay,
    unreplayed,
)
from wgc_runtime.core.conductor.replay import replay as replay_request
from wgc_runtime.core.conductor.sessions import SessionTable
from wgc_runtime.core.conductor.state import Abort, RequestRun
from wgc_runtime.core.conductor.walks import Walks
from wgc_runtime.core.post import Outbox, Post


class ConductorCore:
    """Runs requests' flows over the ranks (see the module docstring)."""

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
        self.post = Post(outbox)
        self.clock = clock
        self.queue_timeout_s = queue_timeout_s
        self.active: dict[str, RequestRun] = {}
        self.admission = Admission(spec, max_concurrent_requests or spec.max_concurrent_requests)
        self.queue: OrderedDict[str, tuple[Request, float]] = self.admission.queue
        self.kv_used: dict[PoolKey, int] = self.admission.kv_used  # pages promised per pool
        self.flows = Flows(spec, self.post)
        self.walks = Walks(spec, self.post, self.flows, clock, walk_timeout_s)
        self.flows.connect(self.walks, self._end)
        self.deadlines = Deadlines(
            self.active,
            self.admission,
            clock,
            walk_timeout_s=walk_timeout_s,
            idle_timeout_s=idle_timeout_s,
            queue_timeout_s=queue_timeout_s,
            end=self._end,
            finish_queued=self._finish_queued,
        )
        self._owners = {s.owner for s in spec.streams}  # hold a request's buffers
        self.sessions = SessionTable(spec.kv_cache.max_sessions)
        self.may_replay = may_replay(spec)  # outputs are remembered (`replay`)
        self.replayed: dict[str, Delivered] = {}  # a queued replay -> what its client has

    @property
    def outbox(self) -> Outbox:
        """Where the conductor's messages go (``outbox(to, msg)``; settable, e.g. to record)."""
        return self.post.send

    @outbox.setter
    def outbox(self, send: Outbox) -> None:
        self.post.send = send

    @property
    def max_concurrent(self) -> int:
        """Requests that may run at once (0 while admission is held)."""
        return self.admission.max_concurrent

    def submit(self, request_id: str, request: Request) -> None:
        """Start the request now, or queue it behind the admission cap and the KV pools
        (`admission`); refuse it at once when no pool could ever hold it."""
        if request_id in self.active or request_id in self.queue:
            raise ValueError(f"request `{request_id}` is already running")
        never = self.admission.never_fits(request_id)
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
                self.post.send(CLIENT, Finished(request_id, False, FailKind.BUSY, why))
                return
        if not self.queue and self.admission.room(len(self.active)):
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
        if self.admission.hold(held):
            self._admit()

    def running(self) -> list[str]:
        return list(self.active)

    def queued(self) -> list[str]:
        return list(self.queue)

    def busy(self) -> bool:
        return bool(self.active or self.queue)

    def kv_waits(self) -> str:
        """The pools a queued request waits for, in words (`Admission.kv_waits`)."""
        return self.admission.kv_waits()

    def waits(self, request_id: str) -> list[str]:
        """What each unfinished flow of a running request waits for (`Deadlines.waits`)."""
        return self.deadlines.waits(request_id)

    def tick(self, now: float | None = None) -> None:
        """End every request whose wait ran past its deadline (`Deadlines.tick`)."""
        self.deadlines.tick(now)

    def fail_stalled(self, why: str = "no rank can make progress") -> None:
        """End every running request with a deadlock error (`Deadlines.fail_stalled`)."""
        self.deadlines.fail_stalled(why)

    def deliver(self, msg: Message) -> None:
        req = self.active.get(getattr(msg, "request", ""))
        if req is None or req.ended:
            return  # a late message of an ended request
        req.last_progress = self.clock()
        try:
            if isinstance(msg, WalkDone):
                self.walks.on_walk_done(req, msg)
            elif isinstance(msg, StateImported):
                self.walks.on_state_imported(req, msg)
            elif isinstance(msg, ClientOut):
                if guard_output(req, msg):  # not when a replay's client has it already
                    self.post.send(
                        CLIENT,
                        Output(
                            req.id,
                            msg.flow,
                            msg.walk,
                            msg.modality,
                            msg.channel,
                            msg.iters,
                            msg.data,
                        ),
                    )
                self.walks.on_emit(req, msg.walk_id)
            elif isinstance(msg, Emitted):  # a routed request's outputs went to its client
                req.outputs += msg.count
                for _ in range(msg.count):
                    self.walks.on_emit(req, msg.walk_id)
            elif isinstance(msg, Output):  # a rank could not reach the client: passed on
                self.post.send(CLIENT, msg)
            elif isinstance(msg, ChunkReady):
                self.flows.on_chunk(req, msg)
            elif isinstance(msg, ChunksDone):
                req.outputs += msg.emits
                self.flows.on_chunks_done(req, msg)
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

    def replay(self, request_id: str, new_id: str) -> str | None:
        """Run ``request_id`` again from its start as ``new_id`` after a restart; None when it
        will, else why it cannot (`wgc_runtime.core.conductor.replay`)."""
        why = replay_request(self, request_id, new_id)
        if why is None:
            self._admit()
        return why

    def drop_session(self, session: str) -> bool:
        """Forget ``session`` (`DELETE /v1/sessions/{id}`); whether it was kept."""
        if not self.sessions.drop(session):
            return False
        self._forget(session)
        return True

    # ---------------------------------------------------------------- a request's start and end

    def _start(self, request_id: str, request: Request) -> None:
        req = RequestRun(request_id, request, last_progress=self.clock())
        req.holds |= self._owners
        inherit(self, req)
        self.active[request_id] = req
        self.admission.promise(1)
        try:
            self.flows.start(req)
        except Abort as exc:
            self._end(req, exc)

    def _end(self, req: RequestRun, error: Abort | None) -> None:
        if req.ended:
            return
        if error is None:
            error = unreplayed(req)
        req.ended = True
        for f in req.flows.values():
            if f.gen is not None:
                with contextlib.suppress(Exception):  # closing must not mask the result
                    f.gen.close()
        self.active.pop(req.id, None)
        self.admission.promise(-1)
        if error is None:
            self.post.send(CLIENT, Finished(req.id, True, outputs=req.outputs))
        else:
            self.post.send(
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
            self.post.send(r, Release(req.id, reason))
        self._session_ended(req.id, ok=error is None)
        self._admit()

    def _admit(self) -> None:
        while self.queue and self.admission.room(len(self.active)):
            rid, (request, _) = self.queue.popitem(last=False)
            self._start(rid, request)

    def _session_ended(self, rid: str, ok: bool) -> None:
        gone = self.sessions.end(rid, ok, self.clock())
        if gone is not None:
            self._forget(gone)

    def _forget(self, session: str) -> None:
        """Every rank frees ``session``'s kept pages."""
        for r in range(self.spec.world_size):
            self.post.send(r, ForgetSession(session))

    def _finish_queued(self, rid: str, kind: FailKind, message: str) -> None:
        self.replayed.pop(rid, None)
        self._session_ended(rid, ok=False)
        self.post.send(CLIENT, Finished(rid, False, kind, message))
