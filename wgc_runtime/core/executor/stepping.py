"""Self-stepping loops: a decode loop's next iteration started in place, without the general
routing.

A loop is *self-stepping* on this rank when its body is one call here that feeds itself: every
input is carried from one of its own outputs (or is a once-per-walk value), it computes the
loop's ``until`` here, and its other outputs go only to streams (`self_stepping` finds such
calls from the plan: the shape of an autoregressive decode loop, ``LLM(token) -> token =
new_token, stop``). After a confirmed iteration whose stop is false, the general path stores the
carried value, hands the stop over (`Loops.stop`), counts the unit done, starts the next
iteration, marks it dirty and looks at its readiness on the next step: ~15 dict and closure
steps per row per decode step. `step_on` does what they add up to (the stop recorded, the
iteration complete, the next one started, its instance queued with its input values) when
nothing else is in the way: no speculative or held effects, no iteration already started
ahead, not the loop's last iteration. Otherwise it declines and the caller routes as usual, so
the two paths leave the same state (`tests/unit/test_self_stepping.py` runs both against the
reference interpreter; every example's decode loop, through the property and e2e suites,
takes this path).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import DestKind, Edge, InputMode, SourceKind
from wgc_runtime.contract.spec import CallSpec, Dest, PieceSpec, RankSpec, Unit
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.state import MISSING, Inst, WalkRun, lookup, truth, unconfirmed

if TYPE_CHECKING:
    from wgc_runtime.core.executor.lanes import Lane
    from wgc_runtime.core.executor.values import Values


@dataclass(frozen=True, slots=True)
class SelfStep:
    """A self-stepping call: its loop, the output port of the loop's stop, which output feeds
    which of its inputs, its once-per-walk inputs, and whether it is the only producer of its
    streams in its piece (then its pushes never wait for an earlier producer's,
    `Streams.push_blocked`: its own earlier iterations pushed first)."""

    loop: str
    max: int
    stop: str
    carried: tuple[tuple[str, str], ...]  # (output port, input port)
    once: tuple[str, ...]
    solo: bool = False  # it is the only producer of every stream it pushes to (in its piece)


def self_stepping(rank_spec: RankSpec) -> dict[tuple[str, int], SelfStep]:
    """(walk, call) -> its `SelfStep`, for every self-stepping call of the rank's pieces."""
    found: dict[tuple[str, int], SelfStep] = {}
    for piece in rank_spec.pieces:
        for call in piece.calls:
            step = _of(piece, call, rank_spec.rank)
            if step is not None:
                found[(piece.walk, call.id)] = step
    return found


def _of(piece: PieceSpec, call: CallSpec, rank: int) -> SelfStep | None:
    if not call.loops:
        return None
    loop = piece.loop(call.loops[-1])
    if loop is None or loop.body != (call.id,) or loop.nested or loop.ranks != (rank,):
        return None
    until = loop.until
    if until is None or until.kind is not SourceKind.CALL or until.call != call.id:
        return None
    carried: list[tuple[str, str]] = []
    once: list[str] = []
    feeds: dict[str, str | None] = {}
    for p in call.inputs:
        if p.mode is InputMode.ONCE:
            once.append(p.port)
        elif (
            p.mode is InputMode.CARRIED
            and p.loop == loop.name
            and p.src.kind is SourceKind.CALL
            and p.src.call == call.id
            and p.src.rank in (None, rank)
        ):
            feeds[p.port] = p.src.port
        else:
            return None
    stops = 0
    for o in call.outputs:
        for d in o.dests:
            if _feeds_itself(d, call, loop.name, rank) and feeds.get(d.port or "") == o.port:
                carried.append((o.port, d.port or ""))
            elif d.kind is DestKind.UNTIL and d.loop == loop.name and o.port == until.port:
                if d.ranks not in ((), (rank,)):
                    return None
                stops += 1
            elif d.kind is not DestKind.STREAM:
                return None
    if stops != 1 or sorted(p for _, p in carried) != sorted(feeds):
        return None
    producers = dict(piece.producers)
    solo = all(producers.get(s) == (call.id,) for s in call.pushes)
    return SelfStep(loop.name, loop.max, until.port or "", tuple(carried), tuple(once), solo)


def _feeds_itself(d: Dest, call: CallSpec, loop: str, rank: int) -> bool:
    return (
        d.kind is DestKind.CALL
        and d.edge is Edge.LOOP_CARRIED
        and d.carried
        and d.loop == loop
        and d.call == call.id
        and d.rank in (None, rank)
    )


class Stepper:
    """The rank's self-stepping calls, and their in-place next iteration (see the module
    docstring)."""

    def __init__(self, rank_spec: RankSpec, requests: Requests, values: Values) -> None:
        self.steps = self_stepping(rank_spec)  # (walk, call) -> its `SelfStep`
        self.requests = requests
        self.ready = values.ready  # the ready queues an instance started here joins
        # (walk, call) -> its `lanes.Lane`: a running row steps there instead (`Lanes.build`)
        self.lanes: dict[tuple[str, int], Lane] = {}

    def step_on(
        self,
        w: WalkRun,
        call: Unit,
        it: tuple[int, ...],
        outputs: dict[str, Any],
        step: SelfStep,
    ) -> bool:
        """Start iteration ``it[-1] + 1`` of the call's loop in place, after iteration ``it``'s
        stream pushes (see the module docstring); False (nothing changed) when the general
        routing must run instead."""
        if not self.requests.live(w):
            return False
        stop = outputs.get(step.stop, MISSING)
        i = it[-1]
        if stop is MISSING or i + 1 >= step.max or truth(stop):
            return False  # the loop's last iteration
        lr = w.loops.get((step.loop, it[:-1]))
        if (
            lr is None
            or lr.ended
            or lr.last is not None
            or lr.started != i + 1  # an iteration already started ahead (speculation)
            or lr.completed != i - 1
            or lr.remaining.get(i) != 1
            or lr.held
            or lr.on_start
            or i in lr.stops
            or not lr.confirmed(i)
            or (len(it) > 1 and unconfirmed(w, call.loops[:-1], it[:-1]) is not None)
        ):
            return False
        nxt = (*it[:-1], i + 1)
        inputs: dict[str, Any] = {}
        for out, port in step.carried:
            v = outputs.get(out, MISSING)
            if v is MISSING:
                return False
            inputs[port] = v
        for port in step.once:
            v = lookup(w.values.get((call.id, port)), nxt)
            if v is MISSING:
                return False
            inputs[port] = v
        # what `Loops.stop(False)`, `unit_done` and `start_iteration` leave for a one-call body
        lr.stops[i] = False
        lr.remaining[i] = 0
        lr.completed = i
        lr.started = i + 2
        lr.remaining[i + 1] = 1
        lane = self.lanes.get((w.walk, call.id)) if self.lanes else None
        if lane is not None:
            lane.join(w, lr, nxt, inputs)
            return True
        inst = Inst(w, call, nxt, queued=True, inputs=inputs)
        w.waiting.setdefault(call.id, {})[nxt] = inst
        self.ready.setdefault((w.walk, call.id), deque()).append(inst)
        return True
