"""What a rank hosts and the settings it runs under: its nodes (`NodeSpec`, with a kv-cache
node's page pool, `KvPoolSpec`), stream buffers (`StreamSpec`), capture units (`CaptureSpec`),
the compiler's memory estimate (`MemorySpec`), the placement's serving settings (`KvCacheSpec`,
`BatchingSpec`, `AttentionSpec`), and `RankSpec`, everything one worker needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.kinds import (
    AttentionKind,
    CaptureBackend,
    CaptureScope,
    Engine,
    FinalMode,
    Policy,
)
from wgc_runtime.contract.spec.pieces import PieceSpec
from wgc_runtime.contract.spec.ports import KV_ITEMSIZE, TypeSpec
from wgc_runtime.contract.spec.version import OMIT_DEFAULT


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
    chunks (once none of them runs, the stream is abandoned).

    **Standing rule.** ``chunk_walk`` set: the stream's one consumer flow, ``chunk_flow`` (an
    ``on`` flow), does nothing per chunk but run walk ``chunk_walk`` (no arguments, no branch, no
    ``fail``), which runs on the owner rank alone. The owner then runs it for every non-empty
    chunk itself, skips empty ones itself, and tells the conductor once, after the final chunk
    (`ChunksDone`): no conductor message per chunk (`wgc.lower.streams.standing_rules`)."""

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
    chunk_walk: str = field(default="", metadata=OMIT_DEFAULT)
    chunk_flow: str = field(default="", metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureSpec:
    """A shape-static unit the runtime may capture (a CUDA graph per batch bucket): a whole loop
    body on one rank (``loop``) or one node step (``call``). ``nodes``: the nodes its calls run;
    ``ports``: ``"call#port"`` -> static type, inputs then outputs. ``shape``: for a unit whose
    ports have shape-bucket dims (sized by options with a fixed set of values), the option
    values this entry is for (one entry per bucket; empty: every request). ``padded``: the
    ``"call#port"`` ports with a bounded dim (``<=N`` in the call's types: 0 to N elements),
    sized here at the bound N."""

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
