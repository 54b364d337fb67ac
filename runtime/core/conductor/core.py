"""The conductor's core: requests in, flows run, walks started on the ranks, outputs out.

`ConductorCore` is transport-agnostic: it takes requests (`submit`, `cancel`) and messages from
the ranks (`deliver`), and sends through ``outbox(to, msg)`` (``to``: a rank, or `CLIENT` for
`Output` / `Finished`). It never blocks; `tick(now)` enforces the deadlines.

**Requests.** At most ``max_concurrent_requests`` run at once; the rest wait in FIFO order (with
a deadline). A request runs its flows side by side: every ``always`` flow, every ``when`` flow
whose condition holds, every ``extern`` flow (``module:function``, imported), and every
``on_stream`` flow, which runs its body once per chunk of its stream: the stream's owner rank
says when chunk j is ready (`ChunkReady`, with its exact ``final`` flag); an *empty* chunk is
skipped (`SkipChunk`), a non-empty one runs the body, then `SkipChunk` drops the chunk unless
the body's walk took it; the flow ends after the final chunk. The request ends when every flow
ended (`Finished(ok=True)`), at the first `Fail` or failure reported by a rank, or on cancel;
then every rank gets `Release`.

**Walks.** A flow's `RunWalk` becomes a walk instance (a fresh ``walk_id``): `StartWalk` to
every rank in `WalkSpec.ranks`, then each walk input: a segment or option value is sent inline
as a `Value` to every call destination (a missing optional input as a bare signal), emitted to
the client or kept for a later walk when its destinations say so; a `Persisted` channel is
resolved by the rank that keeps it (`ForwardPersisted`), which delivers it itself. The flow
resumes when every rank in `WalkSpec.report` sent `WalkDone`; the walk's `persists` then say
where each persisted channel of that flow lives. Persisted channels are per flow (flows run
side by side, so a flow reads only what its own walks persisted).

**Node state.** A kv-cache node may run its walks on several rank groups (prefill on one,
decode on another). The conductor tracks per request where each such node's state lives (the
group of the last walk that ran it: `WalkSpec.kv_groups`); before a walk starts, every handoff
of the walk (`WalkSpec.handoffs`) whose ``from_ranks`` hold the state sends `ExportState` there;
the ranks move the state among themselves and each rank of ``to_ranks`` confirms with
`StateImported`; the walk starts (`StartWalk`, its inputs) after the last confirmation, within
the walk's deadline.

**Streams.** A stream's producer is done for the request once every flow in
`StreamSpec.done_after_flows` that runs has ended (`StreamDone` to the owner). It is abandoned
(`StreamAbandon`: items are accepted and dropped, the producer never stalls) once no flow that
may consume it runs: `StreamSpec.consumer_flows` when the plan has it, else every running flow
that is not one of its producer flows, plus its ``on_stream`` flows (a conservative superset).

**Deadlines.** Every wait has one: a walk not done within ``walk_timeout_s``, a request with no
message for ``idle_timeout_s`` and a request queued longer than ``queue_timeout_s`` end with a
``timeout`` error naming what they waited for; `fail_stalled` ends every running request with a
``deadlock`` error when the caller knows nothing can move.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.messages import (
    CLIENT,
    ChunkReady,
    ClientOut,
    ExportState,
    Failed,
    Finished,
    ForwardPersisted,
    Message,
    Output,
    Release,
    SkipChunk,
    StartWalk,
    StateImported,
    StreamAbandon,
    StreamDone,
    Value,
    WalkDone,
)
from wgc_runtime.contract.node import to_tensor
from wgc_runtime.contract.spec import (
    ConductorSpec,
    Fail,
    FlowSpec,
    Persisted,
    Request,
    RunWalk,
    Segment,
    StreamSpec,
    WalkSpec,
)

Outbox = Callable[[int, Message], None]
CONDUCTOR_KEEPS = -1  # `WalkSpec.persists`: a persisted walk input the conductor holds


class _Abort(Exception):
    def __init__(self, kind: str, message: str, flow=None, walk=None, node=None):
        super().__init__(message)
        self.kind, self.message, self.flow, self.walk, self.node = kind, message, flow, walk, node


@dataclass(eq=False)
class _Flow:
    spec: FlowSpec
    gen: Any = None
    waiting: int | None = None  # walk id
    done: bool = False
    chunks: dict[int, ChunkReady] = field(default_factory=dict)  # on_stream: ready chunks
    index: int = 0  # on_stream: the chunk the body runs for (or waits for)
    current: ChunkReady | None = None


@dataclass(eq=False)
class _WalkWait:
    flow: _Flow
    spec: WalkSpec
    pending: set[int]
    deadline: float
    # node-state moves before the walk starts: (node, rank) imports not yet confirmed, and
    # what starts the walk once they are
    moving: set[tuple[str, int]] = field(default_factory=set)
    start: Callable[[], None] | None = None


@dataclass(eq=False)
class _Req:
    id: str
    request: Request
    flows: dict[str, _Flow] = field(default_factory=dict)
    walks: dict[int, _WalkWait] = field(default_factory=dict)
    persist_loc: dict[tuple[str, str], int] = field(default_factory=dict)
    kept: dict[tuple[str, str], Any] = field(default_factory=dict)  # conductor-held persists
    streams_done: set[str] = field(default_factory=set)
    streams_abandoned: set[str] = field(default_factory=set)
    state_at: dict[str, tuple[int, ...]] = field(default_factory=dict)  # node -> its group
    last_progress: float = 0.0
    ended: bool = False


class ConductorCore:
    """Runs requests' flows over the ranks (see the module docstring)."""

    def __init__(
        self,
        spec: ConductorSpec,
        outbox: Outbox,
        streams: Iterable[StreamSpec] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        walk_timeout_s: float = 600.0,
        idle_timeout_s: float = 120.0,
        queue_timeout_s: float = 600.0,
        max_concurrent_requests: int | None = None,
    ) -> None:
        self.spec = spec
        self.outbox = outbox
        self.streams: list[StreamSpec] = list(streams)
        self.clock = clock
        self.walk_timeout_s = walk_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.queue_timeout_s = queue_timeout_s
        cap = max_concurrent_requests or spec.max_concurrent_requests
        self.max_concurrent = max(1, int(cap))
        self.walks = {w.name: w for w in spec.walks}
        self.active: dict[str, _Req] = {}
        self.queue: OrderedDict[str, tuple[Request, float]] = OrderedDict()
        self._next_walk_id = 0
        self._on_stream = {f.stream: f.name for f in spec.flows if f.kind == "on_stream"}

    # ------------------------------------------------------------------ requests
    def submit(self, request_id: str, request: Request) -> None:
        """Start the request now, or queue it behind the admission cap."""
        if request_id in self.active or request_id in self.queue:
            raise ValueError(f"request `{request_id}` is already running")
        if len(self.active) < self.max_concurrent:
            self._start(request_id, request)
        else:
            self.queue[request_id] = (request, self.clock() + self.queue_timeout_s)

    def cancel(self, request_id: str) -> None:
        if request_id in self.queue:
            del self.queue[request_id]
            self._finish_queued(request_id, "cancelled", "request cancelled by the client")
            return
        req = self.active.get(request_id)
        if req is not None:
            self._end(req, _Abort("cancelled", "request cancelled by the client"))

    def running(self) -> list[str]:
        return list(self.active)

    def queued(self) -> list[str]:
        return list(self.queue)

    def busy(self) -> bool:
        return bool(self.active or self.queue)

    def _start(self, request_id: str, request: Request) -> None:
        req = _Req(request_id, request, last_progress=self.clock())
        self.active[request_id] = req
        try:
            for f in self.spec.flows:
                if self._runs(f, request):
                    req.flows[f.name] = _Flow(f)
            self._update_streams(req)
            for flow in list(req.flows.values()):
                if req.ended:
                    return
                if flow.spec.kind == "on_stream":
                    self._pump_stream_flow(req, flow)
                else:
                    flow.gen = self._generator(flow.spec, request)
                    self._resume(req, flow)
            self._maybe_done(req)
        except _Abort as exc:
            self._end(req, exc)

    @staticmethod
    def _runs(f: FlowSpec, request: Request) -> bool:
        if f.kind != "when":
            return True
        try:
            return bool(f.when(request)) if f.when is not None else True
        except Exception as exc:
            raise _Abort("flow", f"flow `{f.name}`: condition raised {exc!r}", f.name) from exc

    @staticmethod
    def _generator(f: FlowSpec, request: Request):
        if f.kind == "extern":
            module, _, fn = (f.extern or "").partition(":")
            try:
                return getattr(importlib.import_module(module), fn)(request)
            except Exception as exc:
                raise _Abort(
                    "flow", f"flow `{f.name}`: cannot start `{f.extern}`: {exc}", f.name
                ) from exc
        if f.body is None:
            raise _Abort("flow", f"flow `{f.name}` has no body", f.name)
        return f.body(request)

    # ------------------------------------------------------------------ flows
    def _resume(self, req: _Req, flow: _Flow) -> None:
        """Run ``flow`` until it waits for a walk or ends."""
        while not req.ended:
            try:
                step = next(flow.gen)
            except StopIteration:
                self._flow_body_ended(req, flow)
                return
            except _Abort:
                raise
            except Exception as exc:
                raise _Abort(
                    "flow", f"flow `{flow.spec.name}` raised: {exc}", flow.spec.name
                ) from exc
            if isinstance(step, Fail):
                raise _Abort("fail", step.message, flow.spec.name)
            if not isinstance(step, RunWalk):
                raise _Abort("flow", f"flow `{flow.spec.name}` yielded {step!r}", flow.spec.name)
            self._launch(req, flow, step)
            return

    def _flow_body_ended(self, req: _Req, flow: _Flow) -> None:
        flow.gen = None
        if flow.spec.kind == "on_stream" and flow.current is not None:
            chunk, flow.current = flow.current, None
            self._send_skip(req, chunk)
            if chunk.final:
                self._flow_ended(req, flow)
            else:
                flow.index += 1
                self._pump_stream_flow(req, flow)
            return
        self._flow_ended(req, flow)

    def _flow_ended(self, req: _Req, flow: _Flow) -> None:
        flow.done = True
        self._update_streams(req)
        self._maybe_done(req)

    def _pump_stream_flow(self, req: _Req, flow: _Flow) -> None:
        """Run an ``on_stream`` flow's body for every ready chunk, in order."""
        while not req.ended and not flow.done and flow.current is None:
            chunk = flow.chunks.pop(flow.index, None)
            if chunk is None:
                return
            if chunk.empty:  # nothing to process; an empty final chunk only ends the flow
                self._send_skip(req, chunk)
                if chunk.final:
                    self._flow_ended(req, flow)
                    return
                flow.index += 1
                continue
            flow.current = chunk
            flow.gen = self._generator(flow.spec, req.request)
            self._resume(req, flow)

    def _send_skip(self, req: _Req, chunk: ChunkReady) -> None:
        owner = self._stream_owner(chunk.stream)
        if owner is not None:
            self.outbox(owner, SkipChunk(req.id, chunk.stream, chunk.index))

    def _stream_owner(self, name: str) -> int | None:
        return next((s.owner for s in self.streams if s.name == name), None)

    def _maybe_done(self, req: _Req) -> None:
        if not req.ended and all(f.done for f in req.flows.values()):
            self._end(req, None)

    # ------------------------------------------------------------------ walks
    def _launch(self, req: _Req, flow: _Flow, step: RunWalk) -> None:
        name = flow.spec.name
        ws = self.walks.get(step.walk)
        if ws is None:
            raise _Abort("flow", f"flow `{name}` runs unknown walk `{step.walk}`", name)
        known = {i.name for i in ws.inputs}
        extra = sorted(set(step.args) - known)
        if extra:
            raise _Abort(
                "flow", f"walk `{ws.name}` has no input `{extra[0]}` (flow `{name}`)", name, ws.name
            )
        self._next_walk_id += 1
        wid = self._next_walk_id
        flow.waiting = wid
        wait = _WalkWait(flow, ws, set(ws.report), self.clock() + self.walk_timeout_s)
        req.walks[wid] = wait

        def start() -> None:
            options = tuple(self._options(req.request).items())
            for r in ws.ranks:
                self.outbox(r, StartWalk(req.id, wid, ws.name, name, options))
            for inp in ws.inputs:
                self._deliver_input(req, flow, wid, ws, inp, step.args)
            if not wait.pending:  # a walk with no rank to wait for
                self._walk_complete(req, wid)

        self._move_state(req, wid, wait, ws)
        if wait.moving:
            wait.start = start  # once every moved state is imported (`StateImported`)
        else:
            start()

    def _move_state(self, req: _Req, wid: int, wait: _WalkWait, ws: WalkSpec) -> None:
        """Start the node-state moves due before walk ``ws`` (its handoffs whose node's state is
        on their ``from_ranks`` for this request); the state then lives where the walk runs."""
        for h in getattr(ws, "handoffs", ()):
            if req.state_at.get(h.node) != tuple(h.from_ranks):
                continue
            msg = ExportState(req.id, wid, h.node, tuple(h.from_ranks), tuple(h.to_ranks))
            for r in h.from_ranks:
                self.outbox(r, msg)
            wait.moving |= {(h.node, r) for r in h.to_ranks}
        for node, ranks in getattr(ws, "kv_groups", ()):
            req.state_at[node] = tuple(ranks)

    def _options(self, request: Request) -> dict[str, Any]:
        defaults = getattr(request, "defaults", None) or self.spec.option_defaults()
        return {**defaults, **dict(getattr(request, "options", {}) or {})}

    def _deliver_input(self, req, flow: _Flow, wid: int, ws: WalkSpec, inp, args) -> None:
        name = flow.spec.name
        if inp.name not in args:
            if not inp.optional:
                raise _Abort(
                    "flow", f"walk `{ws.name}` needs input `{inp.name}` (flow `{name}`)", name
                )
            value = None
        else:
            arg = args[inp.name]
            if isinstance(arg, Persisted):
                loc = req.persist_loc.get((name, arg.name))
                if loc is None:
                    raise _Abort(
                        "flow",
                        f"flow `{name}` passes `{arg.name}`, which no walk persisted yet",
                        name,
                        ws.name,
                    )
                if loc != CONDUCTOR_KEEPS:
                    # a rank without a piece of the walk that emits the value: wait for it too
                    ack = loc not in ws.report and any(d.kind != "call" for d in inp.dests)
                    if ack:
                        req.walks[wid].pending.add(loc)
                    fwd = ForwardPersisted(
                        req.id, wid, ws.name, name, inp.name, arg.name, inp.dests, ack
                    )
                    self.outbox(loc, fwd)
                    for d in inp.dests:
                        if d.kind == "persist":
                            req.persist_loc[(name, d.name or inp.name)] = loc
                    return
                value = req.kept[(name, arg.name)]
            else:
                value = to_tensor(arg.data if isinstance(arg, Segment) else arg)
        for d in inp.dests:
            if d.kind == "call":
                msg = Value(
                    req.id,
                    wid,
                    ws.name,
                    d.call if d.call is not None else -1,
                    d.port or "",
                    d.edge,
                    d.loop,
                    (),
                    value is None,
                    value,
                )
                self.outbox(d.rank if d.rank is not None else 0, msg)
            elif d.kind == "client":
                channel = d.channel or inp.name
                out = Output(req.id, name, ws.name, d.name or "", channel, (), value)
                self.outbox(CLIENT, out)
            elif d.kind == "persist":
                req.kept[(name, d.name or inp.name)] = value
                req.persist_loc[(name, d.name or inp.name)] = CONDUCTOR_KEEPS

    def _walk_complete(self, req: _Req, wid: int) -> None:
        wait = req.walks.pop(wid)
        for channel, rank in wait.spec.persists:
            if rank != CONDUCTOR_KEEPS:
                req.persist_loc[(wait.flow.spec.name, channel)] = rank
        wait.flow.waiting = None
        self._resume(req, wait.flow)

    # ------------------------------------------------------------------ messages from ranks
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
                    if not wait.pending:
                        self._walk_complete(req, msg.walk_id)
            elif isinstance(msg, StateImported):
                wait = req.walks.get(msg.walk_id)
                if wait is not None and wait.moving:
                    wait.moving.discard((msg.node, msg.rank))
                    if not wait.moving and wait.start is not None:
                        start, wait.start = wait.start, None
                        start()
            elif isinstance(msg, ClientOut):
                self.outbox(
                    CLIENT,
                    Output(
                        req.id, msg.flow, msg.walk, msg.modality, msg.channel, msg.iters, msg.data
                    ),
                )
            elif isinstance(msg, ChunkReady):
                flow_name = self._on_stream.get(msg.stream)
                flow = req.flows.get(flow_name) if flow_name else None
                if flow is not None and not flow.done:
                    flow.chunks[msg.index] = msg
                    self._pump_stream_flow(req, flow)
            elif isinstance(msg, Failed):
                raise _Abort(msg.kind, msg.message, msg.flow, msg.walk, msg.node)
            else:
                raise TypeError(f"the conductor cannot handle {type(msg).__name__}")
        except _Abort as exc:
            self._end(req, exc)

    # ------------------------------------------------------------------ streams
    def _update_streams(self, req: _Req) -> None:
        running = {n for n, f in req.flows.items() if not f.done}
        for s in self.streams:
            if s.name not in req.streams_done and not (set(s.done_after_flows) & running):
                req.streams_done.add(s.name)
                self.outbox(s.owner, StreamDone(req.id, s.name))
            if s.name in req.streams_abandoned:
                continue
            consumers = getattr(s, "consumer_flows", None)
            if consumers is None:
                consumers = (set(req.flows) - set(s.done_after_flows)) | {
                    f.name for f in self.spec.flows if f.stream == s.name
                }
            if not (set(consumers) & running):
                req.streams_abandoned.add(s.name)
                self.outbox(s.owner, StreamAbandon(req.id, s.name))

    # ------------------------------------------------------------------ ending
    def _end(self, req: _Req, error: _Abort | None) -> None:
        if req.ended:
            return
        req.ended = True
        for f in req.flows.values():
            if f.gen is not None:
                with contextlib.suppress(Exception):  # closing must not mask the result
                    f.gen.close()
        self.active.pop(req.id, None)
        if error is None:
            self.outbox(CLIENT, Finished(req.id, True))
        else:
            self.outbox(
                CLIENT,
                Finished(
                    req.id, False, error.kind, error.message, error.flow, error.walk, error.node
                ),
            )
        reason = "finished" if error is None else error.kind
        for r in range(self.spec.world_size):
            self.outbox(r, Release(req.id, reason))
        self._admit()

    def _admit(self) -> None:
        while self.queue and len(self.active) < self.max_concurrent:
            rid, (request, _) = self.queue.popitem(last=False)
            self._start(rid, request)

    def _finish_queued(self, rid: str, kind: str, message: str) -> None:
        self.outbox(CLIENT, Finished(rid, False, kind, message))

    # ------------------------------------------------------------------ deadlines
    def waits(self, request_id: str) -> list[str]:
        """What each unfinished flow of a running request waits for, in words."""
        req = self.active.get(request_id)
        if req is None:
            return []
        out = []
        for name, f in req.flows.items():
            if f.done:
                continue
            wait = req.walks.get(f.waiting) if f.waiting is not None else None
            if wait is not None and wait.moving:
                moves = ", ".join(f"`{n}` to rank {r}" for n, r in sorted(wait.moving))
                out.append(
                    f"flow `{name}` waits for node state to move before walk "
                    f"`{wait.spec.name}` ({moves})"
                )
            elif wait is not None:
                ranks = ", ".join(str(r) for r in sorted(wait.pending))
                out.append(f"flow `{name}` waits for walk `{wait.spec.name}` (ranks {ranks})")
            elif f.spec.kind == "on_stream":
                out.append(f"flow `{name}` waits for chunk {f.index} of stream `{f.spec.stream}`")
            else:
                out.append(f"flow `{name}` waits")
        return out

    def tick(self, now: float | None = None) -> None:
        """End every request whose wait ran past its deadline."""
        now = self.clock() if now is None else now
        for rid, (_, deadline) in list(self.queue.items()):
            if now > deadline:
                del self.queue[rid]
                self._finish_queued(
                    rid,
                    "timeout",
                    f"request waited more than {self.queue_timeout_s:g} s for admission "
                    f"({self.max_concurrent} requests run at once)",
                )
        for req in list(self.active.values()):
            late = [w for w in req.walks.values() if now > w.deadline]
            if late:
                w = late[0]
                ranks = ", ".join(str(r) for r in sorted(w.pending))
                why = f"ranks {ranks} have not reported"
                if w.moving:
                    moves = ", ".join(f"`{n}` to rank {r}" for n, r in sorted(w.moving))
                    why = f"node state still moving before it starts: {moves}"
                self._end(
                    req,
                    _Abort(
                        "timeout",
                        f"walk `{w.spec.name}` did not finish within {self.walk_timeout_s:g} s "
                        f"({why})",
                        w.flow.spec.name,
                        w.spec.name,
                    ),
                )
            elif now - req.last_progress > self.idle_timeout_s:
                waits = "; ".join(self.waits(req.id)) or "nothing"
                self._end(
                    req,
                    _Abort(
                        "timeout",
                        f"no progress for {self.idle_timeout_s:g} s: {waits}",
                    ),
                )

    def fail_stalled(self, why: str = "no rank can make progress") -> None:
        """End every running request with a deadlock error (the caller knows nothing moves)."""
        for req in list(self.active.values()):
            waits = "; ".join(self.waits(req.id)) or "nothing"
            self._end(req, _Abort("deadlock", f"deadlock ({why}): {waits}"))


def load_streams(ranks: Sequence[Any]) -> list[StreamSpec]:
    """Every stream spec of a deployment, from its rank specs (each stream once)."""
    out: dict[str, StreamSpec] = {}
    for r in ranks:
        for s in r.streams:
            out.setdefault(s.name, s)
    return list(out.values())


__all__ = ["CONDUCTOR_KEEPS", "ConductorCore", "load_streams"]
