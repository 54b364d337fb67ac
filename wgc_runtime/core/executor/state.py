"""What the executor keeps: a piece's lookups, and per request its walk, loop and call instances.

`PieceIndex` turns a `PieceSpec`'s tuples into dicts (units by id, loops by name, input ports by
(unit, port), streams to their producers and consumers); every fact in it was computed by the
compiler (`wgc.lower.index`), nothing is derived here. The rest is run-time state: one
`RequestState` per request on this rank, one `WalkRun` per walk instance, one `LoopRun` per
loop instance, one `Inst` per call instance waiting to run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from wgc_runtime.contract.kinds import Cause, Edge, FailKind
from wgc_runtime.contract.messages import base_id
from wgc_runtime.contract.spec import Dest, LoopSpec, PieceSpec, PortIn, Unit
from wgc_runtime.core.streams import StreamBuffer

MISSING = object()
# the rows of a captured step's stop port that only loops' stop conditions read
# (`CapturedSteps.run`): one shared value each, no tensor view per row, and `truth` by identity
STOP_TRUE = torch.tensor(True)
STOP_FALSE = torch.tensor(False)
# an effect of a speculative iteration, held until it is confirmed: (loops, iterations, action)
Held = tuple[tuple[str, ...], tuple[int, ...], Callable[[], None]]
# a stream push parked behind an earlier producer: (order key, streams, start)
ParkedPush = tuple[tuple[int, ...], frozenset[str], Callable[[], None]]
# a walk run's values of one kind: (unit, port) -> iteration key -> value
Stores = dict[tuple[int, str], dict[tuple[int, ...], Any]]
# an item waiting for room in a stream buffer: (seq, src rank, item, continuation or None)
Waiting = tuple[int, int, Any, Callable[[], None] | None]
# a push waiting for a credit: (walk run, item, continuation)
Blocked = tuple["WalkRun", Any, Callable[[], None]]
AFTER_LOOP = (Edge.TERMINAL, Edge.ACCUMULATED)  # edges whose value travels after its loop

# typed default factories for the records' fields (the builtins themselves: a subscripted
# ``dict[K, V]()`` costs ~8x a ``dict()``, and walk runs are made on the hot path)
new_dict = cast("Callable[[], dict[Any, Any]]", dict)
new_set = cast("Callable[[], set[Any]]", set)
new_deque = cast("Callable[[], deque[Any]]", deque)
new_list = cast("Callable[[], list[Any]]", list)


class RequestAbort(Exception):
    """Raised inside the executor to fail one request."""

    def __init__(
        self,
        kind: FailKind,
        message: str,
        walk: str | None = None,
        node: str | None = None,
        cause: Cause | None = None,
    ) -> None:
        super().__init__(message)
        self.kind, self.message, self.walk, self.node = kind, message, walk, node
        self.cause = cause


@dataclass(eq=False)
class PieceIndex:
    """One piece's lookups (see the module docstring)."""

    spec: PieceSpec
    units: dict[int, Unit]  # calls and sink units by id
    loops: dict[str, LoopSpec]
    ports: dict[tuple[int, str], PortIn]  # (unit, port) -> its input spec
    sinks: dict[int, Dest]  # sink unit -> where its value goes
    writes: dict[int, frozenset[str]]  # call -> the output ports it binds (`CallContext.writes`)
    pushes: dict[int, frozenset[str]]  # call -> the streams it pushes to (only calls that do)
    producers: dict[str, tuple[int, ...]]  # stream -> the calls pushing to it
    consumers: dict[str, tuple[int, ...]]  # stream -> the calls taking its chunks
    loop_pushes: dict[str, frozenset[str]]  # loop -> the streams its body pushes to
    order: dict[str, int]  # loop -> its place among its scope's units

    @staticmethod
    def of(spec: PieceSpec) -> PieceIndex:
        units: dict[int, Unit] = {c.id: c for c in spec.calls}
        units.update((u.id, u) for u in spec.sinks)
        return PieceIndex(
            spec=spec,
            units=units,
            loops={lp.name: lp for lp in spec.loops},
            ports={(u.id, p.port): p for u in units.values() for p in u.inputs},
            sinks={u.id: u.dest for u in spec.sinks},
            writes={u.id: frozenset(u.writes) for u in units.values()},
            pushes={c.id: frozenset(c.pushes) for c in spec.calls if c.pushes},
            producers=dict(spec.producers),
            consumers=dict(spec.consumers),
            loop_pushes={lp.name: frozenset(lp.pushes) for lp in spec.loops},
            order={lp.name: lp.order for lp in spec.loops},
        )

    def order_key(self, call: Unit, it: tuple[int, ...]) -> tuple[int, ...]:
        """Where a call instance runs in the walk's statement order: call ids follow the source
        (a loop's calls lie between the units before and after it), iterations in order."""
        if len(it) == 1:  # a call in one loop (a decode step), every step of every row
            return (self.order.get(call.loops[0], 0), it[0], call.id)
        key: list[int] = []
        for lp, i in zip(call.loops, it, strict=True):
            key += (self.order.get(lp, 0), i)
        return (*key, call.id)

    def loop_key(self, name: str, outer: tuple[int, ...]) -> tuple[int, ...]:
        key: list[int] = []
        for lp, i in zip(self.loops[name].chain, outer, strict=False):
            key += (self.order.get(lp, 0), i)
        return (*key, self.order.get(name, 0))


@dataclass(eq=False)
class Inst:
    """One call instance: a call at one iteration vector of one walk instance."""

    walk: WalkRun
    call: Unit
    it: tuple[int, ...]
    dead: bool = False
    queued: bool = False
    # the input values found when it was queued (a call without stream inputs: they stay
    # ready, values are bound once per key), for `_work`; None: look again (stream chunks can
    # go to another instance meanwhile)
    inputs: dict[str, Any] | None = None
    # its place in statement order (`PieceIndex.order_key`), once it registered its pushes
    key: tuple[int, ...] | None = None


@dataclass(eq=False)
class LoopRun:
    """One instance of one loop on this rank."""

    spec: LoopSpec
    outer: tuple[int, ...]
    chain: tuple[str, ...]
    started: int = 0  # iterations started
    completed: int = -1  # the last complete iteration (they complete in order)
    last: int | None = None  # the last iteration, once known
    ended: bool = False
    stops: dict[int, bool] = field(default_factory=new_dict)
    remaining: dict[int, int] = field(default_factory=new_dict)
    # speculative effects per iteration
    held: dict[int, list[Held]] = field(default_factory=new_dict)
    # carried emits / persists
    on_start: dict[int, list[Callable[[], None]]] = field(default_factory=new_dict)
    # terminal values
    yields: dict[tuple[int, str], Any] = field(default_factory=new_dict)
    # accumulated values
    stacks: dict[tuple[int, str], list[Any]] = field(default_factory=new_dict)
    yield_dests: dict[tuple[int, str], dict[int, Dest]] = field(default_factory=new_dict)

    def confirmed(self, i: int) -> bool:
        """Iteration i is not speculative here (its parents' iterations aside)."""
        return i == 0 or self.spec.until is None or self.stops.get(i - 1) is False


@dataclass(eq=False)
class WalkRun:
    req: RequestState
    walk_id: int
    walk: str
    piece: PieceIndex
    flow: str = ""
    options: dict[str, Any] = field(default_factory=new_dict)
    started: bool = False
    values: Stores = field(default_factory=new_dict)
    inits: Stores = field(default_factory=new_dict)
    carried: Stores = field(default_factory=new_dict)
    carried_loop: dict[tuple[int, str], str] = field(default_factory=new_dict)
    loops: dict[tuple[str, tuple[int, ...]], LoopRun] = field(default_factory=new_dict)
    early_stops: dict[tuple[str, tuple[int, ...]], dict[int, bool]] = field(
        default_factory=new_dict
    )
    waiting: dict[int, dict[tuple[int, ...], Inst]] = field(default_factory=new_dict)
    top_remaining: int = 0
    # stream pushes in statement order: producer instances that ran and have not finished
    # pushing (order key -> streams), and pushes parked behind an earlier one
    pushing: dict[tuple[int, ...], frozenset[str]] = field(default_factory=new_dict)
    parked: list[ParkedPush] = field(default_factory=new_list)
    # stream items sent to another rank and not yet acknowledged; a walk whose units are done
    # reports `WalkDone` when they are (``done_pending`` until then)
    unacked: int = 0
    done_pending: bool = False
    # the ranks this walk run sent the walk's header to (`Dest.starts`: their pieces start on
    # their first value)
    headed: set[int] = field(default_factory=new_set)
    # the stream whose standing rule started this run (`chunks.ChunkRules`; "": the conductor)
    chunk_of: str = ""
    # outputs sent to the client directly, told at the end (`WalkDone.emits`, `ChunksDone`)
    emitted: int = 0


@dataclass(eq=False, slots=True)
class Inlet:
    """One stream this rank owns, for one request (`streams.Streams`, owner side): its buffer,
    the items waiting for room (seq, src rank, item, continuation or None), the last chunk index
    the conductor was told of (`ChunkReady`, or run by a standing rule), whether its consumer node
    here learned the request (`Node.expect`) and the request's options it learned; under a
    standing rule (`chunks.ChunkRules`), whether the rule's walk runs for the last chunk, whether
    that chunk is final, and the walks run, chunks skipped and direct outputs sent so far."""

    buf: StreamBuffer
    pending: deque[Waiting] = field(default_factory=new_deque)
    notified: int = -1
    expected: bool = False
    options: tuple[tuple[str, Any], ...] = ()
    chunk_running: bool = False
    chunk_final: bool = False
    chunk_walks: int = 0
    chunks_skipped: int = 0
    chunk_emits: int = 0  # outputs the rule's walks sent the client directly

    @property
    def held(self) -> int:
        """Items the buffer holds (what the worker's usage report shows)."""
        return self.buf.held


@dataclass(eq=False, slots=True)
class Outlet:
    """One (stream, owner rank) this rank pushes to, for one request (`streams.Streams`,
    producer side): credits left, pushes waiting for one (walk run, item, continuation), the
    walk runs of the items in flight (oldest first), and whether the request's header went
    with an item already (the first one carries it)."""

    credits: int
    blocked: deque[Blocked] = field(default_factory=new_deque)
    in_flight: deque[WalkRun] = field(default_factory=new_deque)
    headed: bool = False


@dataclass(eq=False)
class RequestState:
    """One request on this rank: its walk runs, the walk ids finished here, its nodes' state
    dicts and KV handles, its persisted values, and its streams (owned here: `Inlet`; pushed to
    another rank: `Outlet`). State moves in flight (`handoff.Handoff`) and its session
    (`sessions.RankSessions`) are kept by their components, by request id."""

    id: str
    walks: dict[int, WalkRun] = field(default_factory=new_dict)
    finished_walks: set[int] = field(default_factory=new_set)
    node_state: dict[str, dict[str, Any]] = field(default_factory=new_dict)
    # the request's KV handle per kv-cache node (a view of the rank's pool: made once)
    kv_handles: dict[str, Any] = field(default_factory=new_dict)
    # (flow, channel)
    persisted: dict[tuple[str, str], Any] = field(default_factory=new_dict)
    streams: dict[str, Inlet] = field(default_factory=new_dict)
    outlets: dict[tuple[str, int], Outlet] = field(default_factory=new_dict)
    local_walks: int = 0  # walk runs this rank started itself (`chunks.ChunkRules`)
    node_id: str = ""  # the id its nodes see: without a route (`contract.route.base_id`)
    told: float = 0.0  # when the conductor last heard of its direct outputs (`routing`)

    def __post_init__(self) -> None:
        self.node_id = base_id(self.id)
        self.told = time.monotonic()


def lookup(store: dict[tuple[int, ...], Any] | None, key: tuple[int, ...]) -> Any:
    """The value under the longest prefix of ``key`` (a value bound outside some of the
    consumer's loops is keyed by the loops it was bound in), or `MISSING`."""
    if not store:
        return MISSING
    for k in range(len(key), -1, -1):
        v = store.get(key[:k], MISSING)
        if v is not MISSING:
            return v
    return MISSING


def unconfirmed(
    w: WalkRun, loops: tuple[str, ...], it: tuple[int, ...]
) -> tuple[LoopRun, int] | None:
    """The outermost speculative (loop run, iteration) of a chain of loops, or None."""
    for k, name in enumerate(loops):
        lr = w.loops.get((name, it[:k]))
        if lr is not None and not lr.confirmed(it[k]):
            return lr, it[k]
    return None


def truth(v: Any) -> bool:
    """A stop value: a bare signal or an empty tensor is false."""
    if v is STOP_FALSE or v is None:
        return False
    if v is STOP_TRUE:
        return True
    if isinstance(v, torch.Tensor):
        n = v.numel()
        if n == 1:  # the common case, one read (a stop of every decode step)
            return bool(v)
        return bool(v.reshape(-1)[0].item()) if n else False
    return bool(v)
