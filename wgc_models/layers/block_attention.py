"""Attention of *blocks* of new tokens over cached sequences: how BAGEL, V-JEPA 2-AC and π0.5
attend, which a decoder's causal paged attention does not cover.

A forward runs the concatenated tokens of several blocks (one block = the new tokens of one
(request, label) sequence). Each block either **writes** its keys and values to its sequence
(a prefill: BAGEL's text, ViT or VAE segment; V-JEPA's frames; π0.5's prefix) or only reads it
(queries that are not kept: BAGEL's denoising latents, π0.5's noisy action chunk). Its queries
attend to everything the sequence held before the block plus the block itself, **causally**
inside the block (text) or **fully** (image tokens, a frame with its action and state tokens,
an action chunk). Appending a frame per step this way is block-causal attention over frames.

Two caches answer the same `BlockStep.attend(layer, q, k, v)`:

* `PagedBlocks` — the runtime's `PagedKVPool` (what a node gets as ``ctx.kv.pool``): the
  blocks that write take their slots up front (`PagedKVPool.append`), every layer writes them
  into the pool and reads each sequence back from its pages;
* `DenseBlocks` over a `DenseKV` — one contiguous tensor per sequence and layer, grown by
  ``torch.cat``: what a hand-written implementation (and vLLM-Omni's CFG) keeps, used by the
  references, the stateless MPC rollouts and the benchmarks' baselines.

Both gather the same keys and values in the same order and run the same
``scaled_dot_product_attention``, so a model gives the same numbers over either.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F

from wgc_runtime.engines.kv_pool import K, PagedKVPool, V


@dataclass(frozen=True, slots=True)
class Block:
    """One sequence's new tokens in a forward."""

    request: Hashable
    label: str
    tokens: int
    write: bool = True  # append the block's K/V to the sequence (else: read only)
    causal: bool = False  # causal inside the block (text), else full (images, frames, chunks)
    # block-causal inside the block: group sizes in order (π0's state token, then its actions);
    # a token sees its own group and the ones before it. Empty: one group (or `causal`)
    groups: tuple[int, ...] = ()

    def group_ids(self) -> list[int] | None:
        """Each token's group inside the block (None: every token sees the whole block)."""
        if self.causal:
            return list(range(self.tokens))
        if not self.groups:
            return None
        if sum(self.groups) != self.tokens:
            raise ValueError(f"groups {self.groups} do not add up to the block's {self.tokens}")
        return [g for g, n in enumerate(self.groups) for _ in range(n)]


class BlockStep(Protocol):
    """What a model's attention layers call: ``q`` ``[tokens, heads, dim]``, ``k``/``v``
    ``[tokens, kv_heads, dim]`` (the blocks' rows in order) → ``[tokens, heads, dim]``."""

    blocks: tuple[Block, ...]

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor: ...


def _offsets(blocks: Sequence[Block]) -> list[int]:
    out = [0]
    for b in blocks:
        out.append(out[-1] + b.tokens)
    return out


def block_mask(block: Block, prefix: int, device: torch.device) -> torch.Tensor | None:
    """``[tokens, prefix + tokens]`` booleans (True: may attend), None when every query sees
    everything: the prefix always, the block by `Block.group_ids`."""
    ids = block.group_ids()
    if ids is None or block.tokens <= 1:
        return None
    g = torch.tensor(ids, device=device)
    inner = g[None, :] <= g[:, None]
    seen = torch.ones((block.tokens, prefix), dtype=torch.bool, device=device)
    return torch.cat((seen, inner), dim=1)


def block_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """``q`` ``[n, heads, dim]`` over ``keys``/``values`` ``[prefix + n, kv_heads, dim]`` (the
    sequence before the block, then the block) under `block_mask`'s ``mask``. Grouped-query
    heads share their kv head."""
    heads = q.shape[1]
    kv_heads = keys.shape[1]
    qq = q.transpose(0, 1).unsqueeze(0)  # [1, heads, n, dim]
    kk = keys.to(q.dtype).transpose(0, 1).unsqueeze(0)
    vv = values.to(q.dtype).transpose(0, 1).unsqueeze(0)
    out = F.scaled_dot_product_attention(
        qq, kk, vv, attn_mask=mask, scale=scale, enable_gqa=heads != kv_heads
    )
    return out[0].transpose(0, 1)


class PagedBlocks:
    """A `BlockStep` over the runtime's paged pool (module docstring). Construct it once per
    forward: the writing blocks' slots are appended here."""

    def __init__(self, pool: PagedKVPool, blocks: Sequence[Block]):
        self.pool, self.blocks = pool, tuple(blocks)
        self.offsets = _offsets(self.blocks)
        self.prefix = [pool.seq_len(b.request, b.label) for b in self.blocks]
        slots = [pool.append(b.request, b.label, b.tokens) for b in self.blocks if b.write]
        dev = pool.device
        self.slots = torch.cat(slots) if slots else torch.zeros(0, dtype=torch.long, device=dev)
        rows = [
            torch.arange(self.offsets[i], self.offsets[i + 1], device=dev)
            for i, b in enumerate(self.blocks)
            if b.write
        ]
        self.write_rows = torch.cat(rows) if rows else self.slots
        # the pages each block reads (its table after this step's appends)
        self.pages = [
            torch.tensor(pool.page_table(b.request, b.label), dtype=torch.long, device=dev)
            for b in self.blocks
        ]
        self.lengths = [
            p + (b.tokens if b.write else 0) for p, b in zip(self.prefix, self.blocks, strict=True)
        ]
        self.masks = [block_mask(b, p, dev) for b, p in zip(self.blocks, self.prefix, strict=True)]

    def _gather(self, kv_layer: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        pool, n = self.pool, self.lengths[i]
        if n == 0:
            shape = (0, pool.kv_heads, pool.head_dim)
            empty = torch.zeros(shape, dtype=pool.dtype, device=pool.device)
            return empty, empty
        got = kv_layer.index_select(0, self.pages[i])  # [pages, 2, page_size, kv_heads, dim]
        k = got[:, K].reshape(-1, pool.kv_heads, pool.head_dim)[:n]
        v = got[:, V].reshape(-1, pool.kv_heads, pool.head_dim)[:n]
        return k, v

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        kv_layer = self.pool.layer(layer)
        if self.slots.numel():
            ps = self.pool.page_size
            page = torch.div(self.slots, ps, rounding_mode="floor")
            off = self.slots - page * ps
            kv_layer[page, K, off] = k[self.write_rows].to(kv_layer.dtype)
            kv_layer[page, V, off] = v[self.write_rows].to(kv_layer.dtype)
        outs: list[torch.Tensor] = []
        for i, b in enumerate(self.blocks):
            s, e = self.offsets[i], self.offsets[i + 1]
            keys, values = self._gather(kv_layer, i)
            if not b.write:  # the block's own K/V are not in the pool
                keys = torch.cat((keys.to(k.dtype), k[s:e]))
                values = torch.cat((values.to(v.dtype), v[s:e]))
            outs.append(block_attention(q[s:e], keys, values, self.masks[i], scale))
        return torch.cat(outs)


@dataclass
class DenseKV:
    """Contiguous keys and values per (request, label) sequence and layer, grown by
    ``torch.cat`` (the baseline layout; module docstring)."""

    layers: int
    seqs: dict[tuple[Hashable, str], list[tuple[torch.Tensor, torch.Tensor]]] = field(
        default_factory=dict[tuple[Hashable, str], list[tuple[torch.Tensor, torch.Tensor]]]
    )

    def length(self, request: Hashable, label: str) -> int:
        got = self.seqs.get((request, label))
        return 0 if not got else int(got[0][0].shape[0])

    def fork(self, request: Hashable, src: str, dst: str) -> None:
        """``dst`` becomes a copy of ``src`` (a full copy: dense caches share nothing)."""
        self.seqs[(request, dst)] = [(k.clone(), v.clone()) for k, v in self.seqs[(request, src)]]

    def free(self, request: Hashable) -> None:
        for key in [key for key in self.seqs if key[0] == request]:
            del self.seqs[key]


class DenseBlocks:
    """A `BlockStep` over a `DenseKV` (module docstring)."""

    def __init__(self, cache: DenseKV, blocks: Sequence[Block], device: str | torch.device = "cpu"):
        self.cache, self.blocks = cache, tuple(blocks)
        self.offsets = _offsets(self.blocks)
        self.prefix = [cache.length(b.request, b.label) for b in self.blocks]
        dev = torch.device(device)
        self.masks = [block_mask(b, p, dev) for b, p in zip(self.blocks, self.prefix, strict=True)]

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        for i, b in enumerate(self.blocks):
            s, e = self.offsets[i], self.offsets[i + 1]
            seq = self.cache.seqs.setdefault((b.request, b.label), [])
            if len(seq) <= layer:
                empty = k.new_zeros((0, *k.shape[1:]))
                seq.append((empty, empty))
            keys = torch.cat((seq[layer][0], k[s:e]))
            values = torch.cat((seq[layer][1], v[s:e]))
            if b.write:
                seq[layer] = (keys, values)
            outs.append(block_attention(q[s:e], keys, values, self.masks[i], scale))
        return torch.cat(outs)
