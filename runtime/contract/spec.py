"""The records generated modules construct: what each rank runs and what the conductor drives.

`wgc compile` writes one module per rank (``RANK = RankSpec(...)``) and one conductor module
(``CONDUCTOR = ConductorSpec(...)``, with every flow as a Python generator function). This module
defines those records and nothing that needs torch, so a generated module imports in
milliseconds and a test can read it on any machine. It never imports the compiler.

The rank records mirror the compiler's plan field for field (``dataclasses.asdict(RANK)`` equals
the rank's entry in the ``plan.json`` written beside it), and carry the execution contract:

* A *piece* (`PieceSpec`) is the part of one walk that one rank runs: its calls, and its own copy
  of every loop it takes part in (`LoopSpec`; ``ranks`` lists every rank with a copy, so the
  copies can agree on when the loop ends). A worker runs a piece from its `RankSpec` alone.
* Every call input (`PortIn`) has a ``mode``: ``once`` (one value per walk instance, kept for every
  iteration of enclosing loops), ``per_iteration`` (one value per iteration of the innermost
  loop), ``carried`` (iteration 0 reads ``init``, iteration i+1 reads ``src`` of iteration i of
  loop ``loop``), or ``stream`` (the next chunk of stream ``src.name``). ``optional`` inputs may
  arrive as a bare signal (no tensor): the node makes its own default.
* Every call output (`PortOut`) has destinations (`Dest`): ``call`` (a call on the same rank: an
  in-process hand-off; on another rank: the transport), ``client`` (emit), ``persist`` (kept for
  a later walk of the request), ``stream`` (appended to a stream buffer), ``until`` (the stop
  condition of a loop; every rank in ``ranks`` must learn it). ``edge`` says when the value
  travels: ``loop_carried`` feeds the next iteration, ``terminal`` travels once after the loop,
  ``accumulated`` is stacked over iterations and travels after the loop, the rest at once.
  A ``carried`` destination gets the value at the next iteration of ``loop`` (a read written
  before the binding in the body), so the last iteration's value is never delivered. For a
  ``stream`` destination ``rank`` is the stream's owner; a ``client`` one names the emitted
  ``channel``.
* An `emit` / `persist` in a loop of a value from outside the loop's iteration is a `SinkSpec`
  of the piece: a node-less unit that fires once per iteration, fed like a call input.

Node state moves between rank groups when a kv-cache node runs its walks on several groups
(prefill on one, decode on another): `WalkSpec.handoffs` lists the moves that may be due before a
walk starts, `WalkSpec.kv_groups` where each such node's state lives once it started; the
conductor tracks, per request, where each node's state lives and runs the moves (see
`wgc_runtime.core.conductor.core`).

Flows speak a small protocol: a flow body is a generator taking a `Request` and yielding
`RunWalk` (run a walk to completion, with arguments that are request segments, `Persisted`
channels or option values) or `Fail` (end the request with an error). The conductor resumes the
generator when the walk is done, on every rank in `WalkSpec.report`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ITEMSIZE = {"bool": 1, "u8": 1, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4}

# ---------------------------------------------------------------- types, sources, destinations


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A port type: dtype name and dims (an int, or a str for a symbolic dim or ``?``).

    Ports are per request: the runtime adds the batch dimension in front.
    """

    dtype: str
    dims: tuple[int | str, ...]

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    @property
    def nbytes(self) -> int | None:
        """Bytes of one value (one request), or None when a dim is only known at run time."""
        if not self.is_static:
            return None
        n = ITEMSIZE[self.dtype]
        for d in self.dims:
            n *= int(d)
        return n


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where an input value comes from: ``input`` (walk input ``name``), ``call`` (output ``port``
    of call ``call`` on rank ``rank``) or ``stream`` (stream ``name``)."""

    kind: str
    name: str | None = None
    rank: int | None = None
    call: int | None = None
    port: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Dest:
    """Where an output value goes (see the module docstring for ``kind`` and ``edge``)."""

    kind: str
    edge: str
    rank: int | None = None
    call: int | None = None
    port: str | None = None
    name: str | None = None
    loop: str | None = None
    ranks: tuple[int, ...] = ()
    carried: bool = False  # delivered at the next iteration of ``loop`` (never after the last)
    channel: str | None = None  # ``client``: the emitted channel's name


@dataclass(frozen=True, slots=True, kw_only=True)
class PortIn:
    port: str
    channel: str
    mode: str  # once | per_iteration | carried | stream
    src: Source
    init: Source | None = None  # carried: what iteration 0 reads
    type: TypeSpec | None = None
    optional: bool = False
    loop: str | None = None  # carried: the loop that carries it


@dataclass(frozen=True, slots=True, kw_only=True)
class PortOut:
    port: str
    type: TypeSpec | None = None
    dests: tuple[Dest, ...] = ()


# ---------------------------------------------------------------- pieces of walks


@dataclass(frozen=True, slots=True, kw_only=True)
class CallSpec:
    """One call of a node in a walk; ``id`` is unique within the walk (across every rank)."""

    id: int
    node: str
    rank: int
    loops: tuple[str, ...] = ()  # enclosing loops, outermost first
    inputs: tuple[PortIn, ...] = ()
    outputs: tuple[PortOut, ...] = ()
    # the output ports the call binds to channels in the source: what the node must return
    # (`CallContext.writes`); None (hand-written specs): every output port with a destination
    # other than a stream
    writes: tuple[str, ...] | None = None
    source: str = ""  # "file.walk:line"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSpec:
    """One rank's copy of a loop: at most ``max`` iterations, ending early when ``until`` (a
    ``bool[]`` from some rank) is true. ``calls`` are this rank's calls in the body."""

    name: str
    parent: str | None = None
    max: int
    until: Source | None = None
    eager: bool = False
    speculate: bool = True
    ranks: tuple[int, ...] = ()
    calls: tuple[int, ...] = ()
    yield_last: tuple[str, ...] = ()
    yield_all: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkSpec:
    """An `emit` / `persist` in a loop of a value from outside the loop's iteration: a unit of
    the piece that fires once per iteration of ``loops`` (iteration 0 only from ``input.init``
    when the input is ``carried``), like a call without a node. ``id`` is unique among the
    walk's call ids; ``input`` (port ``value``) is fed like a call input; ``dest`` (``client``
    or ``persist``) gets the value with the instance's iterations."""

    id: int
    rank: int
    loops: tuple[str, ...] = ()
    input: PortIn
    dest: Dest
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PieceSpec:
    """The part of walk ``walk`` that rank ``rank`` runs."""

    walk: str
    rank: int
    inputs: tuple[str, ...] = ()  # walk inputs this piece reads
    loops: tuple[LoopSpec, ...] = ()
    calls: tuple[CallSpec, ...] = ()
    source: str = ""
    sinks: tuple[SinkSpec, ...] = ()

    def call(self, id: int) -> CallSpec | None:
        return next((c for c in self.calls if c.id == id), None)

    def loop(self, name: str) -> LoopSpec | None:
        return next((lp for lp in self.loops if lp.name == name), None)


# ---------------------------------------------------------------- what a rank hosts


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """A node hosted on a rank group; ``impl`` is a ``module:Class`` path the worker imports.
    ``inputs`` / ``outputs``: the node's declared port types (port -> `TypeSpec`, None when
    untyped), which the node is built with and its results are checked against; empty in
    hand-written specs, where the ports the rank's calls use stand in."""

    name: str
    impl: str
    engine: str  # stateless | kv_cache
    labels: tuple[str, ...] = ()
    config: tuple[tuple[str, Any], ...] = ()
    ranks: tuple[int, ...] = ()  # the group (tensor parallel shards across it)
    tp: int = 1
    walks: tuple[str, ...] = ("*",)  # the walks it serves on this group; "*" = every walk
    inputs: tuple[tuple[str, TypeSpec | None], ...] = ()
    outputs: tuple[tuple[str, TypeSpec | None], ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSpec:
    """A stream buffer, owned by the consumer's rank."""

    name: str
    producer: tuple[str, str]  # node, port
    consumer: tuple[str, str]
    producer_ranks: tuple[int, ...] = ()
    owner: int
    policy: str  # fixed | sliding | left_context
    params: tuple[tuple[str, int], ...] = ()
    final: str = "partial"  # partial | pad | drop
    after_done: bool = False
    item: TypeSpec | None = None
    capacity: int
    done_after_flows: tuple[str, ...] = ()
    # the flows that may take its chunks (None: unknown, the conductor assumes every flow but
    # its producers'); once none of them runs, the stream is abandoned
    consumer_flows: tuple[str, ...] | None = None
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureSpec:
    """A shape-static unit the runtime may capture (a CUDA graph per batch bucket)."""

    walk: str
    rank: int
    scope: str  # "loop" (a whole loop body) | "call" (one node step)
    loop: str | None = None
    calls: tuple[int, ...] = ()
    ports: tuple[tuple[str, TypeSpec], ...] = ()  # "call#port" -> static type
    buckets: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySpec:
    """The compiler's static memory estimate for one rank, in bytes."""

    kv_bytes: int = 0
    static_buffer_bytes: int = 0
    stream_bytes: int = 0

    @property
    def total(self) -> int:
        return self.kv_bytes + self.static_buffer_bytes + self.stream_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSpec:
    """Everything one worker needs: its nodes, its pieces of walks, its stream buffers."""

    rank: int
    device: str
    host: str
    nodes: tuple[NodeSpec, ...] = ()
    pieces: tuple[PieceSpec, ...] = ()
    streams: tuple[StreamSpec, ...] = ()
    captures: tuple[CaptureSpec, ...] = ()
    memory: MemorySpec = MemorySpec()
    # not in the plan's rank record: lets a worker check it joined the right deployment
    model: str = ""
    placement: str = ""
    world_size: int = 1

    def node(self, name: str) -> NodeSpec | None:
        return next((n for n in self.nodes if n.name == name), None)

    def piece(self, walk: str) -> PieceSpec | None:
        return next((p for p in self.pieces if p.walk == walk), None)


# ---------------------------------------------------------------- walks, as the conductor sees them


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkInputSpec:
    name: str
    optional: bool = False
    ranks: tuple[int, ...] = ()  # the ranks that read it
    # where the value goes: call ports (with their rank), and ``emit``/``persist`` destinations
    # the conductor handles itself because it holds the value
    dests: tuple[Dest, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Handoff:
    """Before the walk starts, the request's state of kv-cache node ``node`` must be on
    ``to_ranks``: if the request last ran the node on ``from_ranks``, it moves from there first
    (the conductor asks ``from_ranks`` to export it, they send it to ``to_ranks``, which import
    it and confirm; then the walk starts)."""

    node: str
    from_ranks: tuple[int, ...]
    to_ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkSpec:
    name: str
    ranks: tuple[int, ...] = ()  # every rank with a piece
    report: tuple[int, ...] = ()  # ranks that must report before the walk is done
    inputs: tuple[WalkInputSpec, ...] = ()
    # persisted channel -> the rank that keeps it (-1: the conductor, for a persisted walk input)
    persists: tuple[tuple[str, int], ...] = ()
    # node-state moves that may be due before the walk starts (prefill/decode disaggregation)
    handoffs: tuple[Handoff, ...] = ()
    # (node, group) for each kv-cache node the walk calls that runs on several groups in the
    # plan: where the request's state of the node lives once the walk has started
    kv_groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    source: str = ""


# ---------------------------------------------------------------- requests and the flow protocol


@dataclass(frozen=True, slots=True)
class Segment:
    """One input segment of a request: a modality, its payload, and named side fields
    (``seg.goal`` in a flow reads ``field("goal")``)."""

    modality: str
    data: Any = None
    fields: tuple[tuple[str, Any], ...] = ()

    def field(self, name: str) -> Any:
        for key, value in self.fields:
            if key == name:
                return value
        raise KeyError(f"input segment ({self.modality}) has no field `{name}`")


class Request(abc.ABC):
    """What a flow reads of a request."""

    @property
    @abc.abstractmethod
    def inputs(self) -> Sequence[Segment]:
        """The input segments, in order."""

    @abc.abstractmethod
    def wants(self, modality: str) -> bool:
        """True when the client asked for output of ``modality``."""

    @abc.abstractmethod
    def has(self, modality: str) -> bool:
        """True when some input segment has ``modality``."""

    @abc.abstractmethod
    def option(self, name: str) -> Any:
        """The request's value of option ``name``, or its declared default."""


@dataclass(frozen=True, slots=True)
class SimpleRequest(Request):
    """A plain `Request`: inputs, the wanted output modalities, and options over defaults."""

    segments: tuple[Segment, ...]
    outputs: frozenset[str] = frozenset()
    options: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> Sequence[Segment]:
        return self.segments

    def wants(self, modality: str) -> bool:
        return modality in self.outputs

    def has(self, modality: str) -> bool:
        return any(s.modality == modality for s in self.segments)

    def option(self, name: str) -> Any:
        if name in self.options:
            return self.options[name]
        if name in self.defaults:
            return self.defaults[name]
        raise KeyError(f"unknown request option `{name}`")


@dataclass(frozen=True, slots=True)
class Persisted:
    """A walk argument: the channel ``name`` an earlier walk of this request persisted."""

    name: str


@dataclass(frozen=True, slots=True)
class RunWalk:
    """Run walk ``walk`` to completion; ``args`` maps walk inputs to segments, `Persisted`
    channels or option values (an optional input left out arrives as a bare signal)."""

    walk: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fail:
    """End the request with an error the client sees."""

    message: str


FlowStep = RunWalk | Fail
FlowGen = Generator[FlowStep, None, None]


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    """A flow of the model.

    ``kind``: ``always`` (runs for every request), ``when`` (runs beside the others when
    ``when(req)`` holds), ``on_stream`` (``body`` runs once per chunk of ``stream``), or
    ``extern`` (``extern`` names a ``module:function`` generator with the same protocol, which
    the conductor imports).
    """

    name: str
    kind: str
    body: Callable[[Request], FlowGen] | None = None
    when: Callable[[Request], bool] | None = None
    stream: str | None = None
    extern: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionSpec:
    """A request option with its declared type (bool, int, float, str) and default."""

    name: str
    type: str
    default: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ConductorSpec:
    """What the conductor needs: the deployment, the walks, the flows, the request options."""

    model: str
    placement: str
    world_size: int
    devices: tuple[str, ...] = ()  # rank i runs on devices[i]
    hosts: tuple[str, ...] = ()  # rank i runs on hosts[i]
    walks: tuple[WalkSpec, ...] = ()
    flows: tuple[FlowSpec, ...] = ()
    options: tuple[OptionSpec, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()  # effective param values
    placed: tuple[str, ...] = ()  # nodes placed on some rank (extern flows may ask)
    max_concurrent_requests: int = 1
    batching: tuple[tuple[str, Any], ...] = ()
    kv_cache: tuple[tuple[str, Any], ...] = ()

    def walk(self, name: str) -> WalkSpec | None:
        return next((w for w in self.walks if w.name == name), None)

    def flow(self, name: str) -> FlowSpec | None:
        return next((f for f in self.flows if f.name == name), None)

    def option_defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def request(
        self,
        segments: Sequence[Segment],
        outputs: Sequence[str] = (),
        options: Mapping[str, Any] | None = None,
    ) -> SimpleRequest:
        """A `SimpleRequest` with this model's option defaults."""
        return SimpleRequest(
            tuple(segments), frozenset(outputs), dict(options or {}), self.option_defaults()
        )
