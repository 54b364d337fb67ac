"""Routing a call's outputs by the plan's destinations, held while the iteration is speculative
(`Router`).

A destination (`Dest`) is a call on this rank (handed over in place) or another (the outbox), the
client (through the conductor, `ClientOut`; a routed request's straight to the client, counted
for the conductor: `wgc_runtime.contract.route`), the request's persisted store, a
stream (`streams`), or a loop's stop condition (`Until` to every rank of the loop). Terminal and
accumulated values are kept until their loop ends. A loop-carried destination that is not a call
(an `emit` or `persist` of a loop-carried channel) fires when the next iteration starts, so the
last iteration's value is never delivered.

`Router` keeps no state of its own beyond the plan's self-stepping calls: what it routes goes
to `Values` (a call here), the post (another rank, the conductor), `Streams` or `Loops` (stops,
and the values kept for a loop's end, in the walk run's `LoopRun`).
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic
from typing import Any

from wgc_runtime.contract.kinds import DestKind, Edge, FailKind
from wgc_runtime.contract.messages import (
    CLIENT,
    CONDUCTOR,
    ROUTE_SEP,
    ClientOut,
    Emitted,
    ForwardPersisted,
    Output,
    Until,
    Value,
    WalkDone,
)
from wgc_runtime.contract.spec import Dest, Unit
from wgc_runtime.core.executor.loops import Loops
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.state import (
    AFTER_LOOP,
    Inst,
    RequestAbort,
    RequestState,
    WalkRun,
    truth,
    unconfirmed,
)
from wgc_runtime.core.executor.stepping import Stepper
from wgc_runtime.core.executor.streams import Push, Streams
from wgc_runtime.core.executor.values import Values, consume
from wgc_runtime.core.post import Post

Done = Callable[[], None]
# a routed request that streams outputs tells the conductor it moves at most this often (an
# `Emitted` of none), where its outputs through the conductor did it for every one
PROGRESS_S = 1.0
Iters = tuple[tuple[str, int], ...]
Begin = Callable[[WalkRun, str, tuple[tuple[str, Any], ...]], None]


class Router:
    """Routes call outputs and sink values (see the module docstring)."""

    begin: Begin

    def __init__(
        self,
        rank: int,
        post: Post,
        requests: Requests,
        values: Values,
        loops: Loops,
        streams: Streams,
        stepper: Stepper,
    ) -> None:
        self.rank = rank
        self.post = post
        self.requests = requests
        self.values = values
        self.loops = loops
        self.streams = streams
        self.stepper = stepper
        self.steps = stepper.steps  # (walk, call) -> its `SelfStep`
        # (walk, call) -> its outputs' stream destinations (output port, dest), in order
        self._streams: dict[tuple[str, int], tuple[tuple[str, Dest], ...]] = {}

    def connect(self, begin: Begin) -> None:
        """How a piece starts on its walk's header (the first value that carries it)."""
        self.begin = begin

    def after_call(self, inst: Inst, outputs: dict[str, Any]) -> None:
        """Route a call's outputs (held while its iteration is speculative), then count it."""
        w, call = inst.walk, inst.call
        if not call.loops or unconfirmed(w, call.loops, inst.it) is None:
            # confirmed (what `Loops.hold` runs at once): no closures to hold
            self.route(w, call, inst.it, outputs, None, inst.key)
            return

        def done() -> None:
            self.loops.unit_done(w, call.loops, inst.it)

        def route() -> None:
            self.route(w, call, inst.it, outputs, done, inst.key)

        self.loops.hold(w, call.loops, inst.it, route)

    def route(
        self,
        w: WalkRun,
        call: Unit,
        it: tuple[int, ...],
        outputs: dict[str, Any],
        done: Done | None,
        key: tuple[int, ...] | None = None,
    ) -> None:
        """Stream pushes first (in statement order, `streams`), then the other destinations; a
        self-stepping call's next iteration starts in place when it can (`stepping`). ``key``:
        the instance's order key, when it has one already; ``done`` None: the unit is counted
        done (`Loops.unit_done`) after its destinations."""
        where = (w.walk, call.id)
        dests = self._streams.get(where)
        if dests is None:
            dests = self._streams[where] = tuple(
                (o.port, d) for o in call.outputs for d in o.dests if d.kind is DestKind.STREAM
            )
        step = self.steps.get(where) if self.steps else None
        if (
            step is not None
            and step.solo
            and len(dests) == 1
            and dests[0][0] in outputs
            and self.streams.send_now(w, dests[0][1], outputs[dests[0][0]])
        ):
            # a self-stepping call's one push, sent on a credit at once (`Streams.send_now`):
            # what ``finish`` below does, without the closures
            order = key if key is not None else w.piece.order_key(call, it)
            if w.pushing.pop(order, None) is not None and w.parked:
                self.streams.unpark(w)
            if not self.stepper.step_on(w, call, it, outputs, step):
                self.deliver(w, call, it, outputs, done)
            return
        pushes: list[Push] = [(d, outputs[port]) for port, d in dests if port in outputs]

        def deliver() -> None:
            if step is None or not self.stepper.step_on(w, call, it, outputs, step):
                self.deliver(w, call, it, outputs, done)

        if not pushes:
            deliver()
            return
        if key is None:
            key = w.piece.order_key(call, it)
        order = key
        streams = self.streams

        def finish() -> None:
            if w.pushing.pop(order, None) is not None and w.parked:
                streams.unpark(w)
            deliver()

        names = frozenset(d.name or "" for d, _ in pushes)

        def start() -> None:
            if len(pushes) == 1:  # the usual one stream: its push goes on to ``finish`` itself
                d, v = pushes[0]
                streams.push(w, d, v, finish)
            else:
                streams.push_all(w, pushes, finish)

        # a self-stepping call that is its streams' only producer is never held back: its
        # earlier iterations pushed first (they complete in order) and nothing else pushes
        if not (step is not None and step.solo) and streams.push_blocked(w, key, names):
            w.parked.append((key, names, start))
        else:
            start()

    def deliver(
        self,
        w: WalkRun,
        call: Unit,
        it: tuple[int, ...],
        outputs: dict[str, Any],
        done: Done | None,
    ) -> None:
        """Every destination of the call's outputs but streams, in port order, then ``done``."""
        seen: set[tuple[tuple[int, str], str | None, Edge]] = set()
        for o in call.outputs:
            if o.port not in outputs:
                continue
            v = outputs[o.port]
            for k, d in enumerate(o.dests):
                if d.kind is DestKind.STREAM:
                    continue
                if d.edge in AFTER_LOOP:
                    self.keep_yield(w, call, it, d, v, o.port, k, seen)
                else:
                    self.dest(w, call, it, d, v, o.port)
        if done is None:
            self.loops.unit_done(w, call.loops, it)
        else:
            done()

    def keep_yield(
        self,
        w: WalkRun,
        call: Unit,
        it: tuple[int, ...],
        d: Dest,
        v: Any,
        port: str,
        k: int,
        seen: set[tuple[tuple[int, str], str | None, Edge]],
    ) -> None:
        """Keep a terminal / accumulated value for the end of loop ``d.loop`` (``k``: the
        destination's index among the port's: two equal destinations, two `emit`s, both
        fire)."""
        lr = self.loops.loop_of(w, call, it, d.loop)
        key = (call.id, port)
        if (key, d.loop, d.edge) not in seen:  # one value, several destinations: keep it once
            seen.add((key, d.loop, d.edge))
            if d.edge == Edge.TERMINAL:
                lr.yields[key] = v
            else:
                lr.stacks.setdefault(key, []).append(v)
        lr.yield_dests.setdefault(key, {})[k] = d

    def dest(self, w: WalkRun, call: Unit, it: tuple[int, ...], d: Dest, v: Any, port: str) -> None:
        req = w.req
        if d.carried and d.kind is not DestKind.CALL:
            # an emit / persist of a loop-carried channel: fires when the next iteration starts
            lr = self.loops.loop_of(w, call, it, d.loop)
            j = call.loops.index(d.loop or "")
            nxt = (*it[:j], it[j] + 1, *it[j + 1 :])
            lr.on_start.setdefault(it[j] + 1, []).append(lambda: self.sink(w, d, v, port, nxt))
            return
        if d.kind is DestKind.CALL:
            tag = tuple(zip(call.loops, it, strict=True))
            if d.carried and d.loop in call.loops:
                j = call.loops.index(d.loop)
                lr = self.loops.loop_of(w, call, it, d.loop)
                if it[j] + 1 >= lr.spec.max or lr.stops.get(it[j]) is True:
                    return  # no next iteration: the last iteration's value is never delivered
                tag = (*tag[:j], (d.loop, it[j] + 1))
            self.send_value(req.id, w.walk_id, w.walk, d, tag, v, w)
        elif d.kind is DestKind.UNTIL:
            j = call.loops.index(d.loop) if d.loop in call.loops else len(it) - 1
            stop = truth(v)
            ranks = d.ranks or (self.rank,)
            if len(ranks) == 1 and ranks[0] == self.rank and self.requests.live(w):
                # what an `Until` to this rank does, without the message
                self.loops.stop(w, d.loop or "", it[:j], it[j], stop)
                return
            msg = Until(req.id, w.walk_id, w.walk, d.loop or "", it[:j], it[j], stop)
            for r in ranks:
                if r == self.rank:
                    self.on_until(msg)
                else:
                    self.post.send(r, msg)
        else:
            self.sink(w, d, v, port, it)

    def on_until(self, m: Until) -> None:
        w = self.requests.walk(m.request, m.walk_id, m.walk)
        if w is not None:
            self.loops.stop(w, m.loop, m.outer, m.iteration, m.stop)

    def sink(self, w: WalkRun, d: Dest, v: Any, channel: str, it: tuple[int, ...]) -> None:
        """A value to the client or the request's persisted store."""
        if d.kind is DestKind.CLIENT:
            channel = d.channel or channel
            rid = w.req.id
            if ROUTE_SEP in rid:  # a routed request: straight to its client (`route`)
                out = Output(rid, w.flow, w.walk, d.name or "", channel, it, v, True)
                self.post.send(CLIENT, out)
                if w.chunk_of or w.piece.spec.reports_done:
                    w.emitted += 1  # told with the walk's end (`WalkDone`, `ChunksDone`)
                    now = monotonic()
                    if now - w.req.told > PROGRESS_S:  # the conductor's idle deadline
                        w.req.told = now
                        self.post.send(CONDUCTOR, Emitted(rid, w.walk_id, 0))
                else:  # the conductor counts this walk's emits (`WalkSpec.done_emits`)
                    self.post.send(CONDUCTOR, Emitted(rid, w.walk_id))
                return
            msg = ClientOut(rid, w.walk_id, w.walk, w.flow, d.name or "", channel, it, v)
            self.post.send(CONDUCTOR, msg)
        elif d.kind is DestKind.PERSIST:
            w.req.persisted[(w.flow, d.name or channel)] = v

    def run_sink(self, inst: Inst, dest: Dest) -> None:
        """A sink unit's instance: send its value to ``dest`` (held while speculative)."""
        w, call = inst.walk, inst.call
        port = call.inputs[0]
        cached = inst.inputs
        inst.inputs = None
        value = cached[port.port] if cached is not None else self.values.input(w, inst, port)
        w.waiting.get(call.id, {}).pop(inst.it, None)
        consume(w, inst)

        def fire() -> None:
            self.sink(w, dest, value, port.channel, inst.it)
            self.loops.unit_done(w, call.loops, inst.it)

        self.loops.hold(w, call.loops, inst.it, fire)

    def send_value(
        self,
        request: str,
        walk_id: int,
        walk: str,
        d: Dest,
        iters: Iters,
        value: Any,
        w: WalkRun | None = None,
    ) -> None:
        """Send a value to ``d``; the first one per walk run ``w`` to a rank whose piece starts
        on its first value (`Dest.starts`) carries the walk's header."""
        local = d.rank == self.rank or d.rank is None
        if local and w is not None and self.requests.live(w):
            # a call of the same walk run here: kept at once (what a `Value` does; the piece
            # has started, so no header is needed)
            call = d.call if d.call is not None else -1
            self.values.store(w, call, d.port or "", d.edge, d.loop, iters, value)
            return
        header = d.starts and w is not None and d.rank not in w.headed
        if header:
            assert w is not None and d.rank is not None
            w.headed.add(d.rank)
        msg = Value(
            request,
            walk_id,
            walk,
            d.call if d.call is not None else -1,
            d.port or "",
            d.edge,
            d.loop,
            iters,
            value is None,
            value,
            w.flow if header and w is not None else "",
            tuple(w.options.items()) if header and w is not None else None,
        )
        if d.rank is None or d.rank == self.rank:
            self.on_value(msg)
        else:
            self.post.send(d.rank, msg)

    def on_value(self, m: Value) -> None:
        """A value for a call here (from another rank, or this one's own header)."""
        w = self.requests.walk(m.request, m.walk_id, m.walk)
        if w is None:
            return
        if m.options is not None and not w.started and not w.piece.spec.needs_start:
            self.begin(w, m.flow, m.options)  # the walk's header: this piece starts on it
        self.values.store(w, m.call, m.port, m.edge, m.loop, m.iters, None if m.signal else m.data)

    def on_forward(self, req: RequestState, m: ForwardPersisted) -> None:
        """Pass a persisted value of the request on (a flow's ``forward``)."""
        if (m.flow, m.name) not in req.persisted:
            raise RequestAbort(
                FailKind.FLOW,
                f"flow `{m.flow}` passes `{m.name}`, which no walk persisted yet",
                m.walk,
            )
        value = req.persisted[(m.flow, m.name)]
        for d in m.dests:
            if d.kind is DestKind.CALL:
                self.send_value(req.id, m.walk_id, m.walk, d, (), value)
            elif d.kind is DestKind.CLIENT:
                channel = d.channel or m.input
                if ROUTE_SEP in req.id:  # a routed request: straight to its client (`route`)
                    direct = Output(req.id, m.flow, m.walk, d.name or "", channel, (), value, True)
                    self.post.send(CLIENT, direct)
                    self.post.send(CONDUCTOR, Emitted(req.id, m.walk_id))
                    continue
                out = ClientOut(req.id, m.walk_id, m.walk, m.flow, d.name or "", channel, (), value)
                self.post.send(CONDUCTOR, out)
            elif d.kind is DestKind.PERSIST:
                req.persisted[(m.flow, d.name or m.input)] = value
        if m.ack:  # no piece of the walk here: say this part of it is done
            self.post.send(CONDUCTOR, WalkDone(req.id, m.walk_id, m.walk, self.rank))
