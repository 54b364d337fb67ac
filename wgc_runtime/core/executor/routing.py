"""Routing a call's outputs by the plan's destinations (held while the iteration is speculative).

A destination (`Dest`) is a call on this rank (handed over in place) or another (the outbox), the
client, the request's persisted store, a stream (`streams`), or a loop's stop condition (`Until`
to every rank of the loop). Terminal and accumulated values are kept until their loop ends. A
loop-carried destination that is not a call (an `emit` or `persist` of a loop-carried channel)
fires when the next iteration starts, so the last iteration's value is never delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import DestKind, Edge
from wgc_runtime.contract.messages import (
    CONDUCTOR,
    ClientOut,
    Until,
)
from wgc_runtime.contract.spec import Dest, Unit
from wgc_runtime.core.executor import stepping
from wgc_runtime.core.executor.state import (
    AFTER_LOOP,
    Inst,
    WalkRun,
    truth,
)

if TYPE_CHECKING:
    from wgc_runtime.core.executor.core import RankExecutor


def _after_call(self: RankExecutor, inst: Inst, outputs: dict[str, Any]) -> None:
    """Route a call's outputs (held while its iteration is speculative), then count it."""
    w, call = inst.walk, inst.call

    def done() -> None:
        self._unit_done(w, call.loops, inst.it)

    def route() -> None:
        self._route(w, call, inst.it, outputs, done, inst.key)

    self._route_or_hold(w, call.loops, inst.it, route)


def _route_or_hold(self: RankExecutor, w: WalkRun, loops, it, action: Callable[[], None]) -> None:
    spec = self._confirmed(w, loops, it) if loops else None
    if spec is None:
        action()
        return
    lr, i = spec
    lr.held.setdefault(i, []).append((loops, it, action))


def _route(
    self: RankExecutor,
    w: WalkRun,
    call: Unit,
    it,
    outputs: dict[str, Any],
    done,
    key: tuple[int, ...] | None = None,
) -> None:
    """Stream pushes first (in statement order, `streams`), then the other destinations; a
    self-stepping call's next iteration starts in place when it can (`stepping`). ``key``: the
    instance's order key, when it has one already."""
    pushes = [
        (d, outputs[o.port])
        for o in call.outputs
        if o.port in outputs
        for d in o.dests
        if d.kind is DestKind.STREAM
    ]
    step = self.self_steps.get((w.walk, call.id)) if self.self_steps else None

    def deliver() -> None:
        if step is None or not stepping.step_on(self, w, call, it, outputs, step):
            self._deliver(w, call, it, outputs, done)

    if not pushes:
        deliver()
        return
    if key is None:
        key = w.piece.order_key(call, it)

    def finish() -> None:
        if w.pushing.pop(key, None) is not None and w.parked:
            self._unpark(w)
        deliver()

    streams = frozenset(d.name or "" for d, _ in pushes)

    def start() -> None:
        if len(pushes) == 1:  # the usual one stream: its push goes on to ``finish`` itself
            d, v = pushes[0]
            self._push(w, d, v, finish)
        else:
            self._push_all(w, pushes, finish)

    # a self-stepping call that is its streams' only producer is never held back: its earlier
    # iterations pushed first (they complete in order) and nothing else pushes to them
    if not (step is not None and step.solo) and self._push_blocked(w, key, streams):
        w.parked.append((key, streams, start))
    else:
        start()


def _deliver(self: RankExecutor, w: WalkRun, call: Unit, it, outputs: dict[str, Any], done) -> None:
    """Every destination of the call's outputs but streams, in port order, then ``done``."""
    seen: set = set()
    for o in call.outputs:
        if o.port not in outputs:
            continue
        v = outputs[o.port]
        for k, d in enumerate(o.dests):
            if d.kind is DestKind.STREAM:
                continue
            if d.edge in AFTER_LOOP:
                self._yield(w, call, it, d, v, o.port, k, seen)
            else:
                self._dest(w, call, it, d, v, o.port)
    done()


def _yield(self, w: WalkRun, call: Unit, it, d: Dest, v: Any, port: str, k: int, seen) -> None:
    """Keep a terminal / accumulated value for the end of loop ``d.loop`` (``k``: the
    destination's index among the port's: two equal destinations, two `emit`s, both fire)."""
    lr = self._loop_of(w, call, it, d.loop)
    key = (call.id, port)
    if (key, d.loop, d.edge) not in seen:  # one value, several destinations: keep it once
        seen.add((key, d.loop, d.edge))
        if d.edge == Edge.TERMINAL:
            lr.yields[key] = v
        else:
            lr.stacks.setdefault(key, []).append(v)
    lr.yield_dests.setdefault(key, {})[k] = d


def _dest(self: RankExecutor, w: WalkRun, call: Unit, it, d: Dest, v: Any, port: str) -> None:
    req = w.req
    if d.carried and d.kind is not DestKind.CALL:
        # an emit / persist of a loop-carried channel: fires when the next iteration starts
        lr = self._loop_of(w, call, it, d.loop)
        j = call.loops.index(d.loop)
        nxt = (*it[:j], it[j] + 1, *it[j + 1 :])
        lr.on_start.setdefault(it[j] + 1, []).append(lambda: self._sink(w, d, v, port, nxt))
        return
    if d.kind is DestKind.CALL:
        tag = tuple(zip(call.loops, it, strict=True))
        if d.carried and d.loop in call.loops:
            j = call.loops.index(d.loop)
            lr = self._loop_of(w, call, it, d.loop)
            if it[j] + 1 >= lr.spec.max or lr.stops.get(it[j]) is True:
                return  # no next iteration: the last iteration's value is never delivered
            tag = (*tag[:j], (d.loop, it[j] + 1))
        self._send_value(req.id, w.walk_id, w.walk, d, tag, v, w)
    elif d.kind is DestKind.UNTIL:
        j = call.loops.index(d.loop) if d.loop in call.loops else len(it) - 1
        stop = truth(v)
        ranks = d.ranks or (self.rank,)
        if len(ranks) == 1 and ranks[0] == self.rank and self._live(w, req.id, w.walk_id):
            self._stop(w, d.loop or "", it[:j], it[j], stop)  # `_on_until` without the message
            return
        msg = Until(req.id, w.walk_id, w.walk, d.loop or "", it[:j], it[j], stop)
        for r in ranks:
            if r == self.rank:
                self._on_until(msg)
            else:
                self.outbox(r, msg)
    else:
        self._sink(w, d, v, port, it)


def _sink(self: RankExecutor, w: WalkRun, d: Dest, v: Any, channel: str, it) -> None:
    if d.kind is DestKind.CLIENT:
        channel = d.channel or channel
        msg = ClientOut(w.req.id, w.walk_id, w.walk, w.flow, d.name or "", channel, it, v)
        self.outbox(CONDUCTOR, msg)
    elif d.kind is DestKind.PERSIST:
        w.req.persisted[(w.flow, d.name or channel)] = v
