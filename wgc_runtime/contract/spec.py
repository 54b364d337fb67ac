"""The plan records: what lowering builds, generated modules construct, and the runtime reads.

One schema for both sides. `wgc compile` lowers a model and a placement into these records
(`wgc.lower`), dumps them to ``plan.json`` and renders them as constructor calls in one module per
rank (``RANK = RankSpec(...)``) and a conductor module (``CONDUCTOR = ConductorSpec(...)``, with
every flow as a generator function, see `wgc_runtime.contract.flow`). Standard library only, so a
generated module imports in milliseconds on any machine; this module never imports the compiler.
Kinds are `StrEnum`s (`wgc_runtime.contract.kinds`).

Every generated module states the `SPEC_VERSION` it was written for; the runtime refuses a
module of another version before importing it (`check_spec_version`), and ``plan.json`` carries
it as ``"version"``. Any change to these records that an older module could not satisfy bumps it.

The execution contract:

* A *piece* (`PieceSpec`) is the part of one walk that one rank runs: its calls, its sink units,
  and its own copy of every loop it takes part in (`LoopSpec`; ``ranks`` lists every rank with a
  copy, so the copies can agree on when the loop ends). A worker runs a piece from its
  `RankSpec` alone. The compiler does the indexing: which units sit directly in the piece's top
  level (``body``) or a loop (`LoopSpec.body`), which loops nest where (``nested``), each loop's
  chain of enclosing loops and its place in statement order (``order``), which calls push to or
  take chunks of which stream (``producers`` / ``consumers``).
* Every call input (`PortIn`) has a ``mode`` (`InputMode`): ``once`` (one value per walk
  instance, kept for every iteration of enclosing loops), ``per_iteration`` (one value per
  iteration of the innermost loop), ``carried`` (iteration 0 reads ``init``, iteration i+1 reads
  ``src`` of iteration i of loop ``loop``), or ``stream`` (the next chunk of stream ``src.name``).
  ``optional`` inputs may arrive as a bare signal (no tensor): the node makes its own default.
* Every call output (`PortOut`) has destinations (`Dest`, `DestKind`): ``call`` (a call on the
  same rank: an in-process hand-off; on another rank: the transport), ``client`` (emit),
  ``persist`` (kept for a later walk of the request), ``stream`` (appended to a stream buffer),
  ``until`` (the stop condition of a loop; every rank in ``ranks`` must learn it). ``edge``
  (`Edge`) says when the value travels: ``loop_carried`` feeds the next iteration, ``terminal``
  travels once after the loop, ``accumulated`` is stacked over iterations and travels after the
  loop, the rest at once. A ``carried`` destination gets the value at the next iteration of
  ``loop`` (a read written before the binding in the body), so the last iteration's value is
  never delivered. For a ``stream`` destination ``rank`` is the stream's owner; a ``client``
  one names the emitted ``channel``.
* An `emit` / `persist` in a loop of a value from outside the loop's iteration is a `SinkSpec`
  of the piece: a node-less unit that fires once per iteration, fed like a call input.

Node state moves between rank groups when a kv-cache node runs its walks on several groups (prefill
on one, decode on another): `WalkSpec.handoffs` lists the moves that may be due before a walk
starts, `WalkSpec.kv_groups` where each such node's state lives once it started; the conductor
tracks, per request, where each node's state lives and runs the moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.kinds import (
    AttentionKind,
    CaptureBackend,
    CaptureScope,
    DestKind,
    Edge,
    Engine,
    FinalMode,
    InputMode,
    Policy,
    SourceKind,
)

SPEC_VERSION = 7
"""The version of these records that generated modules and ``plan.json`` are written for."""

OMIT_DEFAULT = {"omit_default": True}
"""Field metadata: ``plan.json`` leaves the field out while it has its default (a field added
after plans were generated, so those stay byte-identical)."""

ITEMSIZE = {"bool": 1, "u8": 1, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4}
# KV cache dtypes: the language's, plus the spellings placements (M*'s among them) use
KV_ITEMSIZE = {**ITEMSIZE, "fp32": 4, "fp16": 2, "float16": 2, "bfloat16": 2}


class SpecVersionError(RuntimeError):
    """A generated module (or plan) written for another version of these records."""


def check_spec_version(found: int | None, where: str) -> None:
    """Raise `SpecVersionError` unless ``found`` (the version ``where`` was written for; None
    when it names none) is `SPEC_VERSION`."""
    if found == SPEC_VERSION:
        return
    said = "names no spec version" if found is None else f"was generated for spec version {found}"
    raise SpecVersionError(
        f"`{where}` {said}, but this runtime reads spec version {SPEC_VERSION}: recompile it "
        "with this wgc (`wgc compile MODEL.walk --placement P.yaml`)"
    )


# ---------------------------------------------------------------- types, sources, destinations


Dims = tuple[int | str, ...]


def type_parts(t: Any) -> tuple[str, Dims]:
    """``(dtype, dims)`` of a TypeSpec-like value: a `wgc_runtime.contract.spec.TypeSpec`, any
    object with ``dtype`` and ``dims``, or a plain ``(dtype, dims)`` pair."""
    if hasattr(t, "dtype") and hasattr(t, "dims"):
        return str(t.dtype), tuple(t.dims)
    dtype, dims = t
    return str(dtype), tuple(dims)


def render_type(t: Any) -> str:
    dtype, dims = type_parts(t)
    return f"{dtype}[{', '.join(str(d) for d in dims)}]"


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

    kind: SourceKind
    name: str | None = None
    rank: int | None = None
    call: int | None = None
    port: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Dest:
    """Where an output value goes (see the module docstring for ``kind`` and ``edge``)."""

    kind: DestKind
    edge: Edge
    rank: int | None = None
    call: int | None = None
    port: str | None = None
    name: str | None = None
    loop: str | None = None
    ranks: tuple[int, ...] = ()
    carried: bool = False  # delivered at the next iteration of ``loop`` (never after the last)
    channel: str | None = None  # ``client``: the emitted channel's name
    # ``stream`` on another rank: items the producer may send before their acknowledgements
    # (the owner's buffer capacity); 0: each waits for the previous one's
    credits: int = 0
    # ``call`` on another rank whose piece starts on its first value (no `StartWalk`,
    # `PieceSpec.needs_start`): the first value sent there per walk instance carries the
    # walk's header (`Value.flow`, `Value.options`)
    starts: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PortIn:
    port: str
    channel: str
    mode: InputMode
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
    # the output ports the call binds to channels in the source, in the node's port order: what
    # the node must return (`CallContext.writes`)
    writes: tuple[str, ...] = ()
    pushes: tuple[str, ...] = ()  # the streams its outputs are appended to
    source: str = ""  # "file.walk:line"


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkSpec:
    """An `emit` / `persist` in a loop of a value from outside the loop's iteration: a unit of
    the piece that fires once per iteration of ``loops`` (iteration 0 only from ``input.init``
    when the input is ``carried``), like a call without a node. ``id`` is unique among the
    walk's call ids; ``input`` (port ``value``) is fed like a call input; ``dest`` (``client``
    or ``persist``) gets the value with the instance's iterations. The properties let the
    executor treat it like a `CallSpec` with one input and no outputs."""

    id: int
    rank: int
    loops: tuple[str, ...] = ()
    input: PortIn
    dest: Dest
    source: str = ""

    @property
    def node(self) -> str:
        return ""

    @property
    def inputs(self) -> tuple[PortIn, ...]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[PortOut, ...]:
        return ()

    @property
    def writes(self) -> tuple[str, ...]:
        return ()

    @property
    def pushes(self) -> tuple[str, ...]:
        return ()


Unit = CallSpec | SinkSpec  # what runs in a piece: a call, or a sink unit


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSpec:
    """One rank's copy of a loop: at most ``max`` iterations, ending early when ``until`` (a
    ``bool[]`` from some rank) is true.

    ``chain``: the loop's enclosing loops, outermost first, itself last. ``calls``: this rank's
    calls in the body (nested loops included). ``body``: this rank's units directly in the body
    (calls and sink units), ``nested``: the loops directly in it; an iteration is complete when
    both have finished. ``pushes``: the streams this rank's calls in the body push to.
    ``order``: the loop's place in the walk's statement order among the units of its scope (the
    smallest unit id inside it here): stream items of one walk go in statement order."""

    name: str
    parent: str | None = None
    chain: tuple[str, ...] = ()
    max: int
    until: Source | None = None
    eager: bool = False
    speculate: bool = True
    ranks: tuple[int, ...] = ()
    calls: tuple[int, ...] = ()
    body: tuple[int, ...] = ()
    nested: tuple[str, ...] = ()
    pushes: tuple[str, ...] = ()
    order: int = 0
    yield_last: tuple[str, ...] = ()
    yield_all: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PieceSpec:
    """The part of walk ``walk`` that rank ``rank`` runs.

    ``body`` / ``nested``: the units and loops at the walk's top level here (the piece is done
    when they all are). ``producers``: stream -> the calls here that push to it; ``consumers``:
    stream -> the calls here that take its chunks.

    The control messages (`wgc.lower.control`): ``needs_start``: the piece waits for
    `StartWalk` (else it starts on the first value carrying the walk's header);
    ``reports_done``: it sends `WalkDone` when done (else the conductor learns it from the
    walk's other messages); ``needs_release``: it leaves request state behind (else the rank
    drops the request's bookkeeping itself once the piece is done)."""

    walk: str
    rank: int
    inputs: tuple[str, ...] = ()  # walk inputs this piece reads
    loops: tuple[LoopSpec, ...] = ()
    calls: tuple[CallSpec, ...] = ()
    sinks: tuple[SinkSpec, ...] = ()
    body: tuple[int, ...] = ()
    nested: tuple[str, ...] = ()
    producers: tuple[tuple[str, tuple[int, ...]], ...] = ()
    consumers: tuple[tuple[str, tuple[int, ...]], ...] = ()
    needs_start: bool = True
    reports_done: bool = True
    needs_release: bool = True
    source: str = ""

    def call(self, id: int) -> CallSpec | None:
        return next((c for c in self.calls if c.id == id), None)

    def loop(self, name: str) -> LoopSpec | None:
        return next((lp for lp in self.loops if lp.name == name), None)


# ---------------------------------------------------------------- what a rank hosts


@dataclass(frozen=True, slots=True, kw_only=True)
class KvPoolSpec:
    """The paged KV cache of one kv-cache node on one rank, as the runtime allocates it
    (`wgc_runtime.engines.kv_pool.PagedKVPool`): the placement's ``kv_cache:`` (page size,
    pages, dtype) and the node's geometry from its config (``layers``, ``kv_heads``,
    ``head_dim``; ``kv_heads`` is this rank's shard under tensor parallelism). The compiler's
    memory estimate is exactly `nbytes`.

    ``owner``: whose cache it is. A node's own (``owner`` is the node), or, for a
    ``like X { label L }`` copy, X's: the copy reads X's label L. ``shared``: the copy runs on
    X's only group (X runs no walk elsewhere, so the request's pages are always here), so it
    reads X's pool on this rank (no pool of its own); otherwise its pool holds label L, copied
    from X before each walk that reads it (`WalkSpec.kv_copies`).
    ``tokens_per_request``: what one request may hold over all labels (the node's
    ``config kv_tokens``, else the compiler's bound from the walks' static shapes and loop
    ``max``es): admission promises `pages_per_request` before a request starts."""

    owner: str
    labels: tuple[str, ...]
    layers: int
    kv_heads: int
    head_dim: int
    page_size: int
    pages: int
    dtype: str
    tokens_per_request: int
    shared: bool = False
    # a `like X { label L writable }` copy: it writes label L of X's pool (``shared`` too)
    writable: bool = False

    @property
    def pages_per_request(self) -> int:
        return -(-self.tokens_per_request // self.page_size)

    @property
    def nbytes(self) -> int:
        """Bytes the pool allocates (0 for a shared copy: it uses its owner's)."""
        if self.shared:
            return 0
        per_token = 2 * self.layers * self.kv_heads * self.head_dim * KV_ITEMSIZE[self.dtype]
        return self.pages * self.page_size * per_token


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """A node hosted on a rank group; ``impl`` is a ``module:Class`` path the worker imports.
    ``inputs`` / ``outputs``: the node's declared ports in declaration order (port ->
    `TypeSpec`, None when the compiler could not type it): the node is built with them and its
    results are checked against them."""

    name: str
    impl: str
    engine: Engine
    labels: tuple[str, ...] = ()
    config: tuple[tuple[str, Any], ...] = ()
    ranks: tuple[int, ...] = ()  # the group (tensor and sequence parallel shards across it)
    tp: int = 1
    sp: int = 1  # sequence-parallel size (a group of ranks runs each call, like `tp`)
    # the placement's `residency` (M*): `resident` (loaded once), `on_demand` or `reload`; the
    # runtime keeps every node resident for now
    residency: str = "resident"
    walks: tuple[str, ...] = ("*",)  # the walks it serves on this group; "*" = every walk
    inputs: tuple[tuple[str, TypeSpec | None], ...] = ()
    outputs: tuple[tuple[str, TypeSpec | None], ...] = ()
    kv: KvPoolSpec | None = None  # a kv-cache node's cache on this rank
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSpec:
    """A stream buffer, owned by the consumer's rank. The producer is done for a request once
    every flow in ``done_after_flows`` that runs has ended; ``consumer_flows`` may take its
    chunks (once none of them runs, the stream is abandoned)."""

    name: str
    producer: tuple[str, str]  # node, port
    consumer: tuple[str, str]
    producer_ranks: tuple[int, ...] = ()
    owner: int
    policy: Policy
    params: tuple[tuple[str, int], ...] = ()
    final: FinalMode = FinalMode.PARTIAL
    after_done: bool = False
    item: TypeSpec | None = None
    capacity: int
    done_after_flows: tuple[str, ...] = ()
    consumer_flows: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureSpec:
    """A shape-static unit the runtime may capture (a CUDA graph per batch bucket): a loop body
    on one rank (``loop``) or a node step (``call``). ``nodes``: what its calls run; ``ports``:
    ``"call#port"`` -> static type, inputs then outputs. ``shape``: with shape-bucket dims, the
    option values this entry is for. ``padded``: ports with a bounded dim, sized at its bound."""

    walk: str
    rank: int
    scope: CaptureScope
    loop: str | None = None
    calls: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    ports: tuple[tuple[str, TypeSpec], ...] = ()
    buckets: tuple[int, ...] = ()
    shape: tuple[tuple[str, Any], ...] = ()
    padded: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)


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
class KvCacheSpec:
    """The placement's ``kv_cache:``: every kv-cache node's page pool on a rank."""

    page_size: int = 16
    pages: int = 1024
    dtype: str = "f32"
    # the placement's ``sessions:``: how many sessions a rank keeps between their requests
    # (0: none), and how many pages of each pool they may hold parked (0: no page limit);
    # dumped in plan.json only when set (`OMIT_DEFAULT`), so plans without sessions keep
    # their bytes
    max_sessions: int = field(default=0, metadata=OMIT_DEFAULT)
    session_pages: int = field(default=0, metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchingSpec:
    """The placement's ``batching:``: the largest batch per (node, walk) step, and the batch
    sizes captured graphs are recorded for."""

    max_batch: int = 16
    capture: tuple[int, ...] = (1, 2, 4, 8, 16)
    backend: CaptureBackend = CaptureBackend.AUTO


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionSpec:
    """The placement's ``attention:``: which paged-attention backend kv-cache nodes use."""

    backend: AttentionKind = AttentionKind.AUTO


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSpec:
    """Everything one worker needs: its nodes, its pieces of walks, its stream buffers, and the
    deployment settings it runs under (``model``/``placement``/``world_size`` let a worker check
    it joined the right deployment)."""

    rank: int
    device: str
    host: str
    model: str = ""
    placement: str = ""
    world_size: int = 1
    nodes: tuple[NodeSpec, ...] = ()
    pieces: tuple[PieceSpec, ...] = ()
    streams: tuple[StreamSpec, ...] = ()
    captures: tuple[CaptureSpec, ...] = ()
    memory: MemorySpec = MemorySpec()
    kv_cache: KvCacheSpec = KvCacheSpec()
    batching: BatchingSpec = BatchingSpec()
    attention: AttentionSpec = AttentionSpec()

    def node(self, name: str) -> NodeSpec | None:
        return next((n for n in self.nodes if n.name == name), None)

    def piece(self, walk: str) -> PieceSpec | None:
        return next((p for p in self.pieces if p.walk == walk), None)
