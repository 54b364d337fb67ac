"""The `Plan`: what lowering a verified `Model` against a `Placement` produces, as plain data.

Frozen dataclasses of strings, ints, tuples and other plan records only, so a plan dumps to JSON
(`Plan.to_json`) and codegen renders it without looking back at the IR. The runtime never sees
these classes: codegen turns them into `wgc_runtime.contract.spec` constructors in generated
modules.

Vocabulary (the runtime contract, documented in docs/plan.md):

* A *piece* is the part of one walk that one rank runs: its calls, and its own copy of every
  loop it takes part in.
* Every call input port has a *mode*: ``once`` (one value per walk instance, kept for every
  iteration of enclosing loops: walk inputs, values from before a loop, terminal and accumulated
  values), ``per_iteration`` (one value per iteration of the innermost loop, same iteration),
  ``carried`` (iteration 0 from ``init``, iteration i+1 from ``src`` of iteration i), or
  ``stream`` (the next chunk of a stream).
* Every call output port has *destinations*: other calls (same or another rank; the edge kind
  says when the value travels: ``loop_carried`` ones feed the next iteration, ``terminal`` ones
  travel once after the loop, ``accumulated`` ones are stacked and travel after the loop), the
  client (emit), the request's persisted store, a stream, or a loop's stop condition.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

# ---------------------------------------------------------------- sources and destinations


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A port type for the runtime: dtype name and dims (int, or a str for symbolic / `?`)."""

    dtype: str
    dims: tuple[int | str, ...]

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    def nbytes(self, itemsize: int) -> int | None:
        if not self.is_static:
            return None
        n = itemsize
        for d in self.dims:
            n *= int(d)
        return n


@dataclass(frozen=True, slots=True)
class Source:
    """Where an input value comes from.

    kind: ``input`` (walk input ``name``; absent optional inputs arrive as a bare signal),
    ``call`` (output ``port`` of call ``call`` on rank ``rank``), ``stream`` (stream ``name``).
    """

    kind: str
    name: str | None = None
    rank: int | None = None
    call: int | None = None
    port: str | None = None


@dataclass(frozen=True, slots=True)
class Dest:
    """Where an output value goes.

    kind: ``call`` (input ``port`` of call ``call`` on ``rank``), ``client`` (emit as modality
    ``name``), ``persist`` (persisted as ``name``), ``stream`` (appended to stream ``name``),
    ``until`` (the stop condition of loop ``name``; ``ranks`` lists every rank whose copy of the
    loop must learn it).
    ``edge`` is the IR edge kind (internal, loop_init, loop_carried, loop_invariant, terminal,
    accumulated, emitted, persisted, streamed, until); ``loop`` the loop it is scoped to.
    For a ``stream`` destination ``rank`` is the stream's owner (the consumer's rank).
    ``carried``: the value is delivered at the *next* iteration of ``loop`` (a read that comes
    before the binding in the body, as in `emit token` before `-> token = new_token`), so the
    last iteration's value is never delivered; always true for ``loop_carried`` edges.
    ``channel``: for a ``client`` destination, the emitted channel's name (what the client sees).
    """

    kind: str
    edge: str
    rank: int | None = None
    call: int | None = None
    port: str | None = None
    name: str | None = None
    loop: str | None = None
    ranks: tuple[int, ...] = ()
    carried: bool = False
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class PortIn:
    port: str
    channel: str
    mode: str  # once | per_iteration | carried | stream
    src: Source
    init: Source | None  # for carried: the value iteration 0 reads
    type: TypeSpec | None
    optional: bool = False  # fed by an optional walk input: may be a bare signal
    loop: str | None = None  # carried: the loop that carries it


@dataclass(frozen=True, slots=True)
class PortOut:
    port: str
    type: TypeSpec | None
    dests: tuple[Dest, ...]


# ---------------------------------------------------------------- pieces of walks


@dataclass(frozen=True, slots=True)
class CallPlan:
    id: int  # the IR call id, unique within its walk
    node: str
    rank: int
    loops: tuple[str, ...]  # enclosing loops, outermost first
    inputs: tuple[PortIn, ...]
    outputs: tuple[PortOut, ...]
    # the output ports the call binds to channels in the source (`-> a = port, b`), in the
    # node's port order: what the node must return (`CallContext.writes`)
    writes: tuple[str, ...]
    source: str  # "file.walk:line"


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """One rank's copy of a loop. Every rank with a call in the body (or feeding it each
    iteration) has a copy; ``ranks`` lists them all so copies can agree on when it ends."""

    name: str
    parent: str | None
    max: int
    until: Source | None  # the `stop` producer
    eager: bool
    speculate: bool
    ranks: tuple[int, ...]
    calls: tuple[int, ...]  # this rank's calls in the body (nested loops included)
    yield_last: tuple[str, ...]
    yield_all: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class SinkPlan:
    """An `emit` / `persist` in a loop whose value comes from outside the loop's iteration (a
    walk input, a value bound before the loop, an earlier loop's yield, or a loop-carried value
    read before its binding): it fires once per iteration of ``loops``, so it is a unit of the
    piece like a call. ``id`` follows the walk's call ids (unique among them); its one input
    ``input`` (port ``value``) is fed like a call input; ``dest`` is where it sends its value
    (``client`` or ``persist``) with the iterations of the instance."""

    id: int
    rank: int
    loops: tuple[str, ...]
    input: PortIn
    dest: Dest
    source: str


@dataclass(frozen=True, slots=True)
class PiecePlan:
    walk: str
    rank: int
    calls: tuple[CallPlan, ...]
    loops: tuple[LoopPlan, ...]
    inputs: tuple[str, ...]  # walk inputs this piece reads
    source: str
    sinks: tuple[SinkPlan, ...] = ()


# ---------------------------------------------------------------- ranks


@dataclass(frozen=True, slots=True)
class NodePlan:
    name: str
    impl: str
    engine: str  # stateless | kv_cache
    labels: tuple[str, ...]
    config: tuple[tuple[str, object], ...]
    ranks: tuple[int, ...]  # the rank group hosting it (tp shards across it)
    tp: int
    walks: tuple[str, ...]  # the walks it serves on this group ("*" = every walk)
    # the node's declared ports, in declaration order (None: a type the compiler could not
    # resolve): what the worker builds the node with and checks its outputs against
    inputs: tuple[tuple[str, TypeSpec | None], ...]
    outputs: tuple[tuple[str, TypeSpec | None], ...]
    source: str


@dataclass(frozen=True, slots=True)
class StreamPlan:
    name: str
    producer: tuple[str, str]  # node, port
    consumer: tuple[str, str]
    producer_ranks: tuple[int, ...]
    owner: int  # the consumer's rank: it owns the buffer
    policy: str  # fixed | sliding | left_context
    params: tuple[tuple[str, int], ...]  # canonical names, in declaration order
    final: str  # partial | pad | drop
    after_done: bool
    item: TypeSpec | None
    capacity: int  # items buffered before back-pressure
    done_after_flows: tuple[str, ...]  # the producer is done when these flows have ended
    # the flows that may take its chunks: those that can run a walk calling the consumer, and
    # its `on` flows (every flow when an extern flow exists): once none runs, it is abandoned
    consumer_flows: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class CaptureEntry:
    """A shape-static unit the runtime may capture as a CUDA graph, per batch bucket."""

    walk: str
    rank: int
    scope: str  # "loop" (a whole loop body on one rank) | "call" (one node step)
    loop: str | None
    calls: tuple[int, ...]
    ports: tuple[tuple[str, TypeSpec], ...]  # "call#port" -> static type, inputs then outputs
    buckets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    kv_bytes: int
    static_buffer_bytes: int
    stream_bytes: int

    @property
    def total(self) -> int:
        return self.kv_bytes + self.static_buffer_bytes + self.stream_bytes


@dataclass(frozen=True, slots=True)
class RankPlan:
    rank: int
    device: str
    host: str
    nodes: tuple[NodePlan, ...]
    pieces: tuple[PiecePlan, ...]
    streams: tuple[StreamPlan, ...]  # the stream buffers this rank owns
    captures: tuple[CaptureEntry, ...]
    memory: MemoryEstimate


# ---------------------------------------------------------------- conductor and the whole plan


@dataclass(frozen=True, slots=True)
class WalkInputPlan:
    name: str
    optional: bool
    ranks: tuple[int, ...]  # the ranks that read it
    # every destination of the input: call ports (with their rank), and what the conductor
    # handles itself because it holds the value (`emit` / `persist` of a walk input)
    dests: tuple[Dest, ...] = ()


@dataclass(frozen=True, slots=True)
class Handoff:
    """Before the walk starts, the request's state of kv-cache node ``node`` must be on
    ``to_ranks`` (the group running it in this walk): if the request last ran the node on
    ``from_ranks``, the state moves from there first (prefill/decode disaggregation)."""

    node: str
    from_ranks: tuple[int, ...]
    to_ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WalkPlan:
    """What the conductor knows of a walk. In ``persists`` rank -1 means the conductor keeps the
    value itself (a walk input persisted unchanged).

    ``handoffs``: the node-state moves that may have to happen before the walk starts, one per
    (kv-cache node the walk calls, other group running that node in some walk). ``kv_groups``:
    for every kv-cache node the walk calls that runs on more than one group across the plan, the
    group running it here (where the request's state of the node lives once the walk started).
    """

    name: str
    ranks: tuple[int, ...]  # every rank with a piece
    report: tuple[int, ...]  # ranks that must report before the walk is done
    inputs: tuple[WalkInputPlan, ...]
    persists: tuple[tuple[str, int], ...]  # persisted channel -> the rank that keeps it
    handoffs: tuple[Handoff, ...]
    kv_groups: tuple[tuple[str, tuple[int, ...]], ...]
    source: str


@dataclass(frozen=True, slots=True)
class Route:
    """One row of the route table: (walk, node, channel) produced on ``rank`` -> destinations."""

    walk: str
    rank: int
    call: int
    node: str
    port: str
    channel: str
    dests: tuple[Dest, ...]


@dataclass(frozen=True, slots=True)
class Transfer:
    """A cross-rank hop, with its byte size per occurrence (None when the shape is dynamic).

    One row per (producer port, destination rank, edge kind): two consumers on one rank share
    the hop. ``per`` is "iteration" when the hop recurs every iteration of ``loop`` (the innermost
    loop enclosing both ends), else "request" (once per walk instance).
    """

    walk: str
    channel: str
    src_rank: int
    dst_rank: int
    edge: str
    per: str  # "request" | "iteration"
    loop: str | None
    nbytes: int | None
    call: int | None = None  # the producing call
    port: str | None = None


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str
    sha256: str


@dataclass(frozen=True, slots=True)
class Plan:
    model: str
    placement: str  # the placement's name (its file stem)
    sources: tuple[SourceFile, ...]
    params: tuple[tuple[str, object], ...]  # effective values after placement/--set overrides
    options: tuple[tuple[str, str, object], ...]  # name, type, default
    ranks: tuple[RankPlan, ...]
    walks: tuple[WalkPlan, ...]
    routes: tuple[Route, ...]
    transfers: tuple[Transfer, ...]
    placed: tuple[str, ...]  # nodes placed on some rank (for `placed(NODE)` in flows)
    kv_cache: tuple[tuple[str, int], ...]
    batching: tuple[tuple[str, object], ...]
    max_concurrent_requests: int

    def rank(self, r: int) -> RankPlan:
        return self.ranks[r]

    def walk(self, name: str) -> WalkPlan | None:
        return next((w for w in self.walks if w.name == name), None)

    def to_dict(self) -> dict:
        """Like `dataclasses.asdict` (nested records become dicts, tuples stay tuples), without
        its deep copies: plans of 10,000-node models dump in a fraction of the time."""
        return _plain(self)

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, 2-space indent, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(obj: object) -> object:
    cls = type(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELDS.get(cls)
        if names is None:
            names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(obj))
        return {n: _plain(getattr(obj, n)) for n in names}
    if cls is tuple or cls is list:
        return cls(_plain(x) for x in obj)  # type: ignore[attr-defined]
    return obj
