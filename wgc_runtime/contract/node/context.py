"""What a node works with: the `NodeContext` it is built with, and per call the `CallContext`
(the request's seeds, state, stream chunks as `ChunkInfo`, and a kv-cache node's `KvCache`
handle) and the `Work` a batch is made of.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from wgc_runtime.contract.flow import SEED_OPTION
from wgc_runtime.contract.kinds import Engine
from wgc_runtime.contract.spec import AttentionSpec, BatchingSpec, CaptureSpec, KvCacheSpec


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """Where a stream chunk sits in its stream.

    ``index``: chunk number (0, 1, ...). ``start``: the stream index of its first item.
    ``items``: how many real items it holds; ``valid``: how many rows on dim 0 are real (items
    times the item's leading dim; scalar items count one row each); ``size``: rows delivered
    (``size - valid`` rows of zero padding at the end). ``final``: the stream's one final chunk.
    ``after_done``: an empty chunk offered after the final one (`after_done continue`).
    """

    index: int
    start: int
    items: int
    valid: int
    size: int
    final: bool
    after_done: bool = False

    @property
    def empty(self) -> bool:
        return self.items == 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeContext:
    """What a node instance is constructed with (once per hosting rank)."""

    name: str
    impl: str = ""
    config: Mapping[str, Any] = field(default_factory=dict[str, Any])
    device: str = "cpu"
    engine: str = Engine.STATELESS  # an `Engine`: stateless | kv_cache
    labels: tuple[str, ...] = ()  # the node's own KV labels (`like X { label L }`: just L)
    tp_rank: int = 0
    tp_size: int = 1
    inputs: Mapping[str, Any] = field(default_factory=dict[str, Any])  # port -> TypeSpec-like
    outputs: Mapping[str, Any] = field(default_factory=dict[str, Any])
    # the plan's capture units this node takes part in on this rank (`CaptureSpec`s: a whole
    # shape-static loop body or one node step, with its batch buckets): an engine builds its
    # graph runner from them (`wgc_runtime.engines.capture.runner_for`); eager nodes ignore it
    captures: tuple[CaptureSpec, ...] = ()
    # the placement's serving settings, as the rank runs under them: the page pool of a
    # kv-cache node, the batch buckets, the paged-attention backend
    kv_cache: KvCacheSpec = KvCacheSpec()
    batching: BatchingSpec = BatchingSpec()
    attention: AttentionSpec = AttentionSpec()
    # where a node says what its start-up is doing (a line each, shown with the rank's loading
    # progress, e.g. a compile that takes seconds); None when nobody listens
    progress: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def say(self, line: str) -> None:
        """Report one line of start-up progress (nothing when nobody listens)."""
        if self.progress is not None:
            self.progress(f"`{self.name}`: {line}")


class KvCache(Protocol):
    """A request's KV cache of one kv-cache node, as a call sees it (`CallContext.kv`).

    Keys and values are ``[layers, tokens, kv_heads, head_dim]`` (``kv_heads`` and
    ``head_dim`` of the node's pool); ``label`` defaults to the node's first label (``main``
    for a node that declares none; a copy's own label)."""

    labels: tuple[str, ...]
    layers: int
    kv_heads: int
    head_dim: int
    writable: bool
    # for engines that batch requests themselves (a decoder over the paged pool): the rank's
    # pool (`wgc_runtime.engines.kv_pool.PagedKVPool`) and this request's key in it
    pool: Any
    request: Hashable

    def length(self, label: str | None = None) -> int:
        """Tokens in ``label``'s sequence (0 before the first append)."""
        ...

    def append(self, k: torch.Tensor, v: torch.Tensor, label: str | None = None) -> None:
        """Append ``tokens`` positions to ``label``'s sequence (pages are allocated as
        needed; a full pool fails the request with the pool's numbers)."""
        ...

    def keys_values(
        self, layer: int = 0, label: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(K, V)`` of ``label``'s sequence in ``layer``, each ``[length, kv_heads,
        head_dim]`` (a copy)."""
        ...

    def attend(
        self, q: torch.Tensor, layer: int = 0, label: str | None = None, *, causal: bool = True
    ) -> torch.Tensor:
        """Attention of ``q`` (``[tokens, heads, head_dim]``: the last ``tokens`` positions
        of the sequence, or new queries with ``causal=False``) over ``label``'s keys and values
        in ``layer``; ``[tokens, heads, head_dim]``. ``heads`` is a multiple of ``kv_heads``
        (grouped-query attention)."""
        ...

    def truncate(self, length: int, label: str | None = None) -> None:
        """Cut ``label``'s sequence back to its first ``length`` tokens (rewind: a speculative
        step's rejected tokens); the pages past it return to the pool, kept for this request
        by admission. ``length`` may not exceed `length` (`ValueError`)."""
        ...

    def fork(self, src: str, dst: str) -> None:
        """Make ``dst`` a snapshot of ``src`` (copy on branch: full pages are shared)."""
        ...

    def backend(self, heads: int) -> Any:
        """The placement's paged-attention backend over the pool for ``heads`` query heads
        (`wgc_runtime.engines.attention.base.AttentionBackend`: ``plan``, then ``forward`` per
        layer)."""
        ...

    def drop(self, label: str) -> None:
        """Free ``label``'s pages."""
        ...


@dataclass(slots=True, kw_only=True)
class CallContext:
    """One request's call of a node.

    ``iteration`` has one entry per enclosing loop (``loops``), outermost first. ``reads`` are
    the input ports the call takes (with the stream-fed ports), ``writes`` the output ports it
    binds to channels. ``state`` is this request's persistent dict for this node.
    """

    request_id: str
    walk: str
    call: int
    node: str = ""
    flow: str = ""
    loops: tuple[str, ...] = ()
    iteration: tuple[int, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    state: dict[str, Any] = field(default_factory=dict[str, Any])
    chunks: Mapping[str, ChunkInfo] = field(default_factory=dict[str, ChunkInfo])
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    kv: KvCache | None = None  # a kv-cache node's cache for this request (see `KvCache`)

    def seed(self, salt: str = "") -> int:
        """A deterministic 63-bit seed from the request, walk, call, iteration and ``salt``."""
        key = f"{self._seed_base()}|{self.walk}|{self.call}|{self.iteration}|{salt}"
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest()) >> 1

    def request_seed(self, salt: str = "") -> int:
        """A deterministic seed from the request and ``salt`` only: every call (and every node)
        that asks with the same salt gets the same seed (e.g. the starting noise of a denoising
        loop that several nodes must agree on)."""
        key = f"{self._seed_base()}|{salt}"
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest()) >> 1

    def _seed_base(self) -> str:
        """What the seeds derive from: the request's seed (`SEED_OPTION`) when it was given
        one, else its id (so requests with one seed compute the same, whatever their ids)."""
        seed = self.options.get(SEED_OPTION)
        return self.request_id if seed is None else str(seed)

    def generator(self, salt: str = "", per_call: bool = True) -> torch.Generator:
        """A torch generator seeded by `seed` (``per_call``) or `request_seed`."""
        g = torch.Generator()
        g.manual_seed(self.seed(salt) if per_call else self.request_seed(salt))
        return g


@dataclass(slots=True)
class Work:
    """One ready call: its input port values and its context."""

    inputs: dict[str, torch.Tensor | None]
    ctx: CallContext
