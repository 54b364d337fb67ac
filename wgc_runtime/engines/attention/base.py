"""The attention-backend interface and the per-batch metadata every backend reads.

A step of a `kv_cache` node over a batch of sequences (one sequence = one (request, label) pair)
goes:

    meta = prepare_step(pool, [(req, "main", n_new), (req, "cfg_text", n_new), ...])
    backend.plan(meta)                      # once per batch (FlashInfer plans its wrappers here)
    for layer in range(layers):
        q, k, v = ...                       # q [total_q, heads, dim], k/v [total_q, kv_heads, dim]
        backend.write_kv(pool.layer(layer), k, v, meta.slot_mapping)
        out = backend.forward(q, pool.layer(layer), meta)      # [total_q, heads, dim]

Queries of a batch are ragged: sequence ``b`` owns rows ``qo_indptr[b]:qo_indptr[b+1]`` of ``q``.
Its queries are its LAST ``q_len`` tokens (their K/V are written first), so query ``i`` sits at
position ``kv_len - q_len + i`` (`AttentionMetadata.positions`, for rotary embeddings) and
attends causally to positions ``<= `` that one (FlashInfer's bottom-right causal alignment).
Decode is the case where every ``q_len`` is 1 (`AttentionMetadata.is_decode`). Grouped-query
attention: ``heads`` is a multiple of ``kv_heads`` and query head ``h`` reads kv head
``h // (heads // kv_heads)``.

Page tables travel in two equivalent forms: FlashInfer's CSR (``kv_indptr``, ``kv_indices``,
``kv_last_page_len``) and a padded ``block_tables`` ``[batch, max_pages]`` (Triton); host lists
(``tables``, ``q_lens``, ``kv_lens``) are kept for the torch reference.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from wgc_runtime.engines.kv_pool import PagedKVPool


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionMetadata:
    """What one batched attention step needs: ragged queries over paged sequences."""

    page_size: int
    tables: tuple[tuple[int, ...], ...]  # page ids per sequence (host)
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]  # tokens per sequence, INCLUDING this step's queries
    qo_indptr: torch.Tensor  # int32 [batch + 1]
    kv_indptr: torch.Tensor  # int32 [batch + 1]
    kv_indices: torch.Tensor  # int32 [kv_indptr[-1]]
    kv_last_page_len: torch.Tensor  # int32 [batch], in 1..page_size
    kv_lens_t: torch.Tensor  # int32 [batch]
    block_tables: torch.Tensor  # int32 [batch, max_pages], padded with page 0
    positions: torch.Tensor  # int64 [total_q]: each query's position in its sequence
    slot_mapping: torch.Tensor | None = None  # int64 [total_q]: where this step's K/V go

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def total_q(self) -> int:
        return sum(self.q_lens)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.q_lens)

    @property
    def max_q_len(self) -> int:
        return max(self.q_lens, default=0)

    @property
    def max_kv_len(self) -> int:
        return max(self.kv_lens, default=0)

    @classmethod
    def from_tables(
        cls,
        tables: Sequence[Sequence[int]],
        kv_lens: Sequence[int],
        q_lens: Sequence[int],
        page_size: int,
        *,
        device: str | torch.device = "cpu",
        slot_mapping: torch.Tensor | None = None,
    ) -> AttentionMetadata:
        """Metadata for explicit page tables (``kv_lens[b]`` tokens on ``tables[b]``)."""
        if not (len(tables) == len(kv_lens) == len(q_lens)):
            raise ValueError("tables, kv_lens and q_lens must have one entry per sequence")
        for t, n, q in zip(tables, kv_lens, q_lens, strict=True):
            if not 1 <= q <= n or len(t) != -(-n // page_size):
                raise ValueError(f"bad sequence: {len(t)} pages, {n} kv tokens, {q} queries")

        def i32(values: Sequence[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int32, device=device)

        counts = [len(t) for t in tables]
        width = max(counts, default=0) or 1
        block = torch.zeros((len(tables), width), dtype=torch.int32)
        for b, t in enumerate(tables):
            block[b, : len(t)] = torch.tensor(t, dtype=torch.int32)
        positions = [n - q + i for n, q in zip(kv_lens, q_lens, strict=True) for i in range(q)]
        return cls(
            page_size=page_size,
            tables=tuple(tuple(t) for t in tables),
            q_lens=tuple(q_lens),
            kv_lens=tuple(kv_lens),
            qo_indptr=i32(_cumsum(q_lens)),
            kv_indptr=i32(_cumsum(counts)),
            kv_indices=i32([p for t in tables for p in t]),
            kv_last_page_len=i32([(n - 1) % page_size + 1 for n in kv_lens]),
            kv_lens_t=i32(list(kv_lens)),
            block_tables=block.to(device),
            positions=torch.tensor(positions, dtype=torch.long, device=device),
            slot_mapping=slot_mapping,
        )


def _cumsum(xs: Sequence[int]) -> list[int]:
    out = [0]
    for x in xs:
        out.append(out[-1] + x)
    return out


Seq = tuple[Hashable, str, int]  # (request, label, query tokens this step)


def build_metadata(
    pool: PagedKVPool, batch: Sequence[Seq], *, slot_mapping: torch.Tensor | None = None
) -> AttentionMetadata:
    """Metadata for ``batch`` as the pool holds it now (the queries' slots already appended)."""
    return AttentionMetadata.from_tables(
        [pool.page_table(r, lab) for r, lab, _ in batch],
        [pool.seq_len(r, lab) for r, lab, _ in batch],
        [n for _, _, n in batch],
        pool.page_size,
        device=pool.device,
        slot_mapping=slot_mapping,
    )


def prepare_step(pool: PagedKVPool, batch: Sequence[Seq]) -> AttentionMetadata:
    """Append each sequence's new tokens to the pool, then build the step's metadata (with the
    slot mapping of the new tokens, in batch order)."""
    slots = [pool.append(r, lab, n) for r, lab, n in batch]
    mapping = torch.cat(slots) if slots else torch.zeros(0, dtype=torch.long, device=pool.device)
    return build_metadata(pool, batch, slot_mapping=mapping)


class AttentionBackend(abc.ABC):
    """Batched paged attention (prefill and decode) over a `PagedKVPool` layer.

    One instance per engine (fixed head geometry); `plan` once per batch, then `write_kv` and
    `forward` once per layer. ``kv_layer`` is ``pool.layer(i)``:
    ``[pages, 2, page_size, kv_heads, head_dim]``.
    """

    name: ClassVar[str] = "?"

    def __init__(
        self,
        *,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        scale: float | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        if num_heads % num_kv_heads:
            raise ValueError(f"heads ({num_heads}) must be a multiple of kv heads ({num_kv_heads})")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.group = num_heads // num_kv_heads
        self.page_size = page_size
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
        self.device, self.dtype = torch.device(device), dtype
        self.meta: AttentionMetadata | None = None

    @classmethod
    def available(cls, device: str | torch.device = "cpu") -> bool:
        """Whether this backend can run on ``device`` in this process."""
        return True

    def plan(self, meta: AttentionMetadata) -> None:
        """Prepare for a batch (once, before its layers). Backends cache what they derive."""
        self.meta = meta

    def write_kv(
        self, kv_layer: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        """Store ``k``/``v`` (``[n, kv_heads, head_dim]``) at slots ``slot_mapping`` (``[n]``)."""
        page = torch.div(slot_mapping, self.page_size, rounding_mode="floor")
        offset = slot_mapping - page * self.page_size
        kv_layer[page, 0, offset] = k.to(kv_layer.dtype)
        kv_layer[page, 1, offset] = v.to(kv_layer.dtype)

    def forward(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata | None = None
    ) -> torch.Tensor:
        """Attention of ``q`` (``[total_q, heads, head_dim]``) over the batch's sequences."""
        meta = meta if meta is not None else self.meta
        if meta is None:
            raise RuntimeError("attention forward before plan(): no metadata for this batch")
        if meta is not self.meta:
            self.plan(meta)
        if q.shape != (meta.total_q, self.num_heads, self.head_dim):
            raise ValueError(
                f"q is {tuple(q.shape)}, expected "
                f"{(meta.total_q, self.num_heads, self.head_dim)} for this batch"
            )
        if meta.is_decode:
            return self.decode(q, kv_layer, meta)
        return self.prefill(q, kv_layer, meta)

    @abc.abstractmethod
    def prefill(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Ragged causal attention: ``q`` ``[total_q, heads, dim]`` → same shape."""

    @abc.abstractmethod
    def decode(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """One query per sequence: ``q`` ``[batch, heads, dim]`` → same shape."""
