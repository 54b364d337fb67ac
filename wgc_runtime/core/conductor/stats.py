"""What the conductor can say about its work, for `/metrics` and the playground: walk
latencies, request outcomes, and per-request walk events.

`ConductorStats` is a tap on the conductor's traffic, sans-I/O like the core it watches: the
host loop shows it every message the core sends (`sent`) and every message from a rank
(`received`) and the end of each request (`ended`). A walk instance is timed from its first
`StartWalk` or header-carrying `Value` (a lazy rank's start) until every rank it waits for has
sent `WalkDone` (the ranks of `WalkSpec.report`, plus a rank asked to acknowledge a
`ForwardPersisted`) and its `WalkSpec.done_emits` emits arrived; node-state moves before it are
not part of it. Latencies go into cumulative histograms per walk (`BUCKETS`, seconds), outcomes are
counted per `FailKind` (``ok`` for a finished request). For requests being *traced* (the
playground asks), every walk start and finish is also queued as an event (`take_events`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.messages import (
    ClientOut,
    Finished,
    ForwardPersisted,
    Message,
    StartWalk,
    Value,
    WalkDone,
)

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class WalkHistogram:
    """Cumulative counts per bucket upper bound (`BUCKETS`, then +Inf), sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        for i in range(bisect.bisect_left(BUCKETS, seconds), len(self.counts)):
            self.counts[i] += 1
        self.total += seconds
        self.n += 1


@dataclass(frozen=True, slots=True)
class WalkEvent:
    """A walk of a traced request started (``seconds`` 0) or finished (its duration)."""

    request: str
    flow: str
    walk: str
    done: bool
    seconds: float


@dataclass
class _Timing:
    request: str
    flow: str
    walk: str
    start: float
    pending: set[int]
    emits: int = 0


class ConductorStats:
    """The tap (see the module docstring)."""

    def __init__(self, spec: ConductorSpec, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.report = {w.name: frozenset(w.report) for w in spec.walks}
        self.emits = {w.name: w.done_emits for w in spec.walks}
        self.walks: dict[str, WalkHistogram] = {w.name: WalkHistogram() for w in spec.walks}
        self.outcomes: dict[str, int] = {}
        self.traced: set[str] = set()
        self._timing: dict[int, _Timing] = {}
        self._events: list[WalkEvent] = []

    def sent(self, msg: Message) -> None:
        if isinstance(msg, Value) and msg.options is None:
            return  # a plain value, not a walk's start
        if isinstance(msg, StartWalk | Value) and msg.walk_id not in self._timing:
            pending = set(self.report.get(msg.walk, ()))
            now = self.clock()
            emits = self.emits.get(msg.walk, 0)
            timing = _Timing(msg.request, msg.flow, msg.walk, now, pending, emits)
            self._timing[msg.walk_id] = timing
            if msg.request in self.traced:
                self._events.append(WalkEvent(msg.request, msg.flow, msg.walk, False, 0.0))
        elif isinstance(msg, ForwardPersisted) and msg.ack:
            timing = self._timing.get(msg.walk_id)
            if timing is not None:
                timing.pending.add(-1)  # answered by a rank outside `report`: see `received`
        elif isinstance(msg, Finished):
            self.ended(msg.request, "ok" if msg.ok else str(msg.kind or "error"))

    def received(self, msg: Message) -> None:
        if not isinstance(msg, WalkDone | ClientOut):
            return
        timing = self._timing.get(msg.walk_id)
        if timing is None:
            return
        if isinstance(msg, ClientOut):
            if timing.emits <= 0:
                return
            timing.emits -= 1
        elif msg.rank in timing.pending:
            timing.pending.discard(msg.rank)
        else:
            timing.pending.discard(-1)
        if timing.pending or timing.emits > 0:
            return
        del self._timing[msg.walk_id]
        seconds = self.clock() - timing.start
        self.walks.setdefault(timing.walk, WalkHistogram()).observe(seconds)
        if timing.request in self.traced:
            self._events.append(WalkEvent(timing.request, timing.flow, timing.walk, True, seconds))

    def ended(self, request: str, outcome: str) -> None:
        """The request ended: count its outcome, forget its walks still running."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.traced.discard(request)
        for wid in [w for w, t in self._timing.items() if t.request == request]:
            del self._timing[wid]

    def take_events(self) -> list[WalkEvent]:
        out, self._events = self._events, []
        return out
