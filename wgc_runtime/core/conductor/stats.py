"""What the conductor can say about its work, for `/metrics` and the playground: walk
latencies, request outcomes, and per-request walk events.

`ConductorStats` is a tap on the conductor's traffic, sans-I/O like the core it watches: the
host loop shows it every message the core sends (`sent`) and every message from a rank
(`received`) and the end of each request (`ended`). A walk instance is timed from its first
`StartWalk` or header-carrying `Value` (a lazy rank's start) until every rank it waits for has
sent `WalkDone` (the ranks of `WalkSpec.report`, plus a rank asked to acknowledge a
`ForwardPersisted`) and its `WalkSpec.done_emits` emits arrived (or were counted: a routed
request's, `Emitted`, `WalkDone.emits`); node-state moves before it are
not part of it. Latencies go into cumulative histograms per walk (`BUCKETS`, seconds), outcomes are
counted per `FailKind` (``ok`` for a finished request). For requests being *traced* (the
playground asks), every walk start and finish is also queued as an event (`take_events`).

A stream's standing rule (`StreamSpec.chunk_walk`) runs its chunk walks on the owner rank with
no `StartWalk` or `WalkDone` here (their walk ids are the owner's: negative). For a traced request
they show as one walk: started at the first emit of one of them, done at the stream's
`ChunksDone`, timed between the two (or 0 when none emitted); they are not in the histograms.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.control import Stats
from wgc_runtime.contract.messages import (
    ChunksDone,
    ClientOut,
    Emitted,
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
        # standing rules: stream -> (flow, chunk walk); a traced request's ruled walk -> start
        self.ruled = {
            st.name: (st.chunk_flow, st.chunk_walk) for st in spec.streams if st.chunk_walk
        }
        self._ruled_walks = {walk for _, walk in self.ruled.values()}
        self._ruled_start: dict[tuple[str, str], float] = {}

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
        if isinstance(msg, ChunksDone):
            self._ruled_done(msg)
            return
        if not isinstance(msg, WalkDone | ClientOut | Emitted):
            return
        if isinstance(msg, ClientOut) and msg.walk_id < 0:
            self._ruled_emit(msg)
            return
        timing = self._timing.get(msg.walk_id)
        if timing is None:
            return
        if isinstance(msg, ClientOut | Emitted):
            if timing.emits <= 0:
                return
            timing.emits -= msg.count if isinstance(msg, Emitted) else 1
        else:
            timing.emits -= msg.emits  # a routed request's outputs of the piece
            if msg.rank in timing.pending:
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

    def _ruled_emit(self, msg: ClientOut) -> None:
        """An emit of a chunk walk the owner ran by a standing rule (see the module docstring)."""
        key = (msg.request, msg.walk)
        traced = msg.request in self.traced and msg.walk in self._ruled_walks
        if traced and key not in self._ruled_start:
            self._ruled_start[key] = self.clock()
            self._events.append(WalkEvent(msg.request, msg.flow, msg.walk, False, 0.0))

    def _ruled_done(self, msg: ChunksDone) -> None:
        flow, walk = self.ruled.get(msg.stream, ("", ""))
        start = self._ruled_start.pop((msg.request, walk), None)
        if msg.request not in self.traced or not walk:
            return
        if start is None:  # no chunk walk emitted: it shows as started and done at once
            self._events.append(WalkEvent(msg.request, flow, walk, False, 0.0))
        seconds = 0.0 if start is None else self.clock() - start
        self._events.append(WalkEvent(msg.request, flow, walk, True, seconds))

    def ended(self, request: str, outcome: str) -> None:
        """The request ended: count its outcome, forget its walks still running."""
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.traced.discard(request)
        for key in [k for k in self._ruled_start if k[0] == request]:
            del self._ruled_start[key]
        for wid in [w for w, t in self._timing.items() if t.request == request]:
            del self._timing[wid]

    def reply(self, running: int, queued: int) -> Stats:
        """The counters as the client protocol's `Stats` (with the requests running, queued)."""
        walks = tuple((name, tuple(h.counts), h.total, h.n) for name, h in self.walks.items())
        return Stats(running, queued, BUCKETS, tuple(sorted(self.outcomes.items())), walks)

    def take_events(self) -> list[WalkEvent]:
        out, self._events = self._events, []
        return out
