"""Walks: a flow's `RunWalk` becomes a walk instance on the ranks.

A fresh ``walk_id``; `StartWalk` to every rank in `WalkSpec.ranks` but the ``lazy`` ones (they
start on their first value: the conductor's first `Value` to such a rank carries the walk's
header, `Dest.starts`), then each walk input: a segment or option value is sent inline as a
`Value` to every call destination (a missing optional input as a bare signal), emitted to the
client or kept for a later walk when its destinations say so; a `Persisted` channel is resolved
by the rank that keeps it (`ForwardPersisted`), which delivers it itself (a lazy rank it
delivers to gets `StartWalk` then: the keeper sends no header). The flow resumes when every
rank in `WalkSpec.report` sent `WalkDone` and the walk's ``done_emits`` emits arrived; the
walk's `persists` then say where each persisted channel of that flow lives. Persisted channels
are per flow (flows run side by side, so a flow reads only what its own walks persisted).

**Node state.** A kv-cache node may run its walks on several rank groups (prefill on one,
decode on another). The conductor tracks per request where each such node's state lives (the
group of the last walk that ran it: `WalkSpec.kv_groups`); before a walk starts, every handoff
of the walk (`WalkSpec.handoffs`) whose ``from_ranks`` hold the state sends `ExportState` there;
the ranks move the state among themselves and each rank of ``to_ranks`` confirms with
`StateImported`; the walk starts (`StartWalk`, its inputs) after the last confirmation.

`Walks` owns the plan's walk specs, the walk id counter and the walk deadline; a request's walk
waits (`WalkWait`) live in its `RequestRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wgc_runtime.contract.conductor import ConductorSpec, WalkInputSpec, WalkSpec
from wgc_runtime.contract.flow import Persisted, Request, RunWalk, Segment, SimpleRequest
from wgc_runtime.contract.kinds import DestKind, FailKind
from wgc_runtime.contract.messages import (
    CLIENT,
    CopyKv,
    ExportState,
    ForwardPersisted,
    Output,
    StartWalk,
    StateImported,
    Value,
    WalkDone,
)
from wgc_runtime.contract.node import to_tensor
from wgc_runtime.core.conductor.flows import Flows
from wgc_runtime.core.conductor.state import (
    CONDUCTOR_KEEPS,
    Abort,
    FlowRun,
    RequestRun,
    WalkWait,
)
from wgc_runtime.core.post import Post


class Walks:
    """Starts walk instances on the ranks and learns when they are done (see the module
    docstring)."""

    def __init__(
        self,
        spec: ConductorSpec,
        post: Post,
        flows: Flows,
        clock: Callable[[], float],
        walk_timeout_s: float,
    ) -> None:
        self.spec = spec
        self.by_name = {w.name: w for w in spec.walks}
        self.post = post
        self.flows = flows
        self.clock = clock
        self.walk_timeout_s = walk_timeout_s
        self.next_id = 0

    def launch(self, req: RequestRun, flow: FlowRun, step: RunWalk) -> None:
        """Start a flow's `RunWalk`: a new walk instance (after the node-state moves due)."""
        name = flow.spec.name
        ws = self.by_name.get(step.walk)
        if ws is None:
            raise Abort(FailKind.FLOW, f"flow `{name}` runs unknown walk `{step.walk}`", name)
        known = {i.name for i in ws.inputs}
        extra = sorted(set(step.args) - known)
        if extra:
            raise Abort(
                FailKind.FLOW,
                f"walk `{ws.name}` has no input `{extra[0]}` (flow `{name}`)",
                name,
                ws.name,
            )
        self.next_id += 1
        wid = self.next_id
        flow.waiting = wid
        wait = WalkWait(flow, ws, set(ws.report), self.clock() + self.walk_timeout_s)
        wait.emits = ws.done_emits
        req.walks[wid] = wait
        req.holds.update(r for r in ws.ranks if r not in ws.no_release)

        def start() -> None:
            options = tuple(self.options(req.request).items())
            started = {r for r in ws.ranks if r not in ws.lazy}
            for r in sorted(started):
                self.post.send(r, StartWalk(req.id, wid, ws.name, name, options))
            for inp in ws.inputs:
                self.deliver_input(req, flow, wid, ws, inp, step.args, options, started)
            if wait.done():  # a walk with nothing to wait for
                self.complete(req, wid)

        self.move_state(req, wid, wait, ws)
        if wait.moving:
            wait.start = start  # once every moved state is imported (`StateImported`)
        else:
            start()

    def on_walk_done(self, req: RequestRun, msg: WalkDone) -> None:
        req.outputs += msg.emits  # sent to a routed request's client directly
        wait = req.walks.get(msg.walk_id)
        if wait is not None:
            wait.pending.discard(msg.rank)
            wait.emits -= msg.emits
            if wait.done():
                self.complete(req, msg.walk_id)

    def on_state_imported(self, req: RequestRun, msg: StateImported) -> None:
        wait = req.walks.get(msg.walk_id)
        if wait is not None and wait.moving:
            wait.moving.discard((msg.node, msg.rank))
            if not wait.moving and wait.start is not None:
                start, wait.start = wait.start, None
                start()

    def on_emit(self, req: RequestRun, walk_id: int) -> None:
        """An emit of walk ``walk_id`` reached the client (or went to it directly: `Emitted`):
        one fewer to wait for."""
        wait = req.walks.get(walk_id)
        if wait is not None and wait.emits > 0:
            wait.emits -= 1
            if wait.done():
                self.complete(req, walk_id)

    def move_state(self, req: RequestRun, wid: int, wait: WalkWait, ws: WalkSpec) -> None:
        """Start the node-state moves due before walk ``ws`` (its handoffs whose node's state is
        on their ``from_ranks`` for this request; the state then lives where the walk runs) and its
        KV label copies (from wherever the owner's state lives)."""
        # a KV label read on another group: copied there first, and before a handoff of its owner
        # (a rank takes the conductor's messages in order: it copies the label, then exports)
        for cp in ws.kv_copies:
            src = req.state_at.get(cp.owner, tuple(cp.from_ranks))
            copy = CopyKv(req.id, wid, cp.owner, cp.label, cp.node, src, tuple(cp.to_ranks))
            for r in src:
                self.post.send(r, copy)
            wait.moving |= {(cp.node, r) for r in cp.to_ranks}
        for h in ws.handoffs:
            if req.state_at.get(h.node) != tuple(h.from_ranks):
                continue
            msg = ExportState(req.id, wid, h.node, tuple(h.from_ranks), tuple(h.to_ranks))
            for r in h.from_ranks:
                self.post.send(r, msg)
            wait.moving |= {(h.node, r) for r in h.to_ranks}
        for node, ranks in ws.kv_groups:
            req.state_at[node] = tuple(ranks)

    def options(self, request: Request) -> dict[str, Any]:
        """The request's option values, defaults included (`CallContext.options`)."""
        if isinstance(request, SimpleRequest):
            return request.option_values()
        return {o.name: request.option(o.name) for o in self.spec.options}

    def deliver_input(
        self,
        req: RequestRun,
        flow: FlowRun,
        wid: int,
        ws: WalkSpec,
        inp: WalkInputSpec,
        args: Mapping[str, Any],
        options: tuple[tuple[str, Any], ...] = (),
        started: set[int] | None = None,
    ) -> None:
        """Send walk input ``inp``; ``started``: the ranks that have the walk's header already
        (`StartWalk`, or an earlier `Value` of this walk), updated here."""
        started = set(ws.ranks) if started is None else started
        name = flow.spec.name
        if inp.name not in args:
            if not inp.optional:
                raise Abort(
                    FailKind.FLOW,
                    f"walk `{ws.name}` needs input `{inp.name}` (flow `{name}`)",
                    name,
                )
            value = None
        else:
            arg = args[inp.name]
            if isinstance(arg, Persisted):
                loc = req.persist_loc.get((name, arg.name))
                if loc is None:
                    raise Abort(
                        FailKind.FLOW,
                        f"flow `{name}` passes `{arg.name}`, which no walk persisted yet",
                        name,
                        ws.name,
                    )
                if loc != CONDUCTOR_KEEPS:
                    # a rank without a piece of the walk that emits the value: wait for it too
                    ack = loc not in ws.report and any(
                        d.kind is not DestKind.CALL for d in inp.dests
                    )
                    if ack:
                        req.walks[wid].pending.add(loc)
                    for d in inp.dests:  # the keeper sends no header: start lazy ranks here
                        r = d.rank if d.rank is not None else 0
                        if d.starts and r not in started:
                            started.add(r)
                            self.post.send(r, StartWalk(req.id, wid, ws.name, name, options))
                    fwd = ForwardPersisted(
                        req.id, wid, ws.name, name, inp.name, arg.name, inp.dests, ack
                    )
                    self.post.send(loc, fwd)
                    for d in inp.dests:
                        if d.kind is DestKind.PERSIST:
                            req.persist_loc[(name, d.name or inp.name)] = loc
                    return
                value = req.kept[(name, arg.name)]
            else:
                value = to_tensor(arg.data if isinstance(arg, Segment) else arg)
        for d in inp.dests:
            if d.kind is DestKind.CALL:
                r = d.rank if d.rank is not None else 0
                header = d.starts and r not in started
                if header:
                    started.add(r)
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
                    name if header else "",
                    options if header else None,
                )
                self.post.send(r, msg)
            elif d.kind is DestKind.CLIENT:
                channel = d.channel or inp.name
                out = Output(req.id, name, ws.name, d.name or "", channel, (), value)
                self.post.send(CLIENT, out)
            elif d.kind is DestKind.PERSIST:
                req.kept[(name, d.name or inp.name)] = value
                req.persist_loc[(name, d.name or inp.name)] = CONDUCTOR_KEEPS

    def complete(self, req: RequestRun, wid: int) -> None:
        wait = req.walks.pop(wid)
        for channel, rank in wait.spec.persists:
            if rank != CONDUCTOR_KEEPS:
                req.persist_loc[(wait.flow.spec.name, channel)] = rank
        wait.flow.waiting = None
        self.flows.resume(req, wait.flow)
