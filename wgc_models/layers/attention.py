"""Grouped-query attention over the paged KV pool, and what one forward's attention reads.

Tokens are *ragged*: a forward takes the concatenated tokens of several sequences (one
sequence = one (request, label) of the pool) with their positions, and an `AttnStep` that says
where their K/V go and what they attend to:

* the plain path: an `AttentionMetadata` from ``prepare_step`` (any mix of prefill and decode),
  through ``backend.forward``;
* the static path (`StaticDecode`): one token per row of fixed-shape buffers (page tables
  padded to a fixed width, kv lengths, slots): no host synchronisation and no data-dependent
  shapes, so a CUDA graph can capture it. A backend in `CAPTURABLE_DECODE` decodes from views
  of those buffers (`static_meta`); otherwise `StaticDecode.prepare` derives the gather/scatter
  indices and the length mask once per step (not once per layer) and `StaticDecode.attend`
  attends with three batched matrix operations over exactly the pages in use (on the CPU the
  page-table width is cut to the longest row; a GPU keeps the full static width, so the step
  stays capturable).

`Attention` runs q/k/v as ONE matrix product (`FusedLinears`) and rotates q and k together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.linear import FusedLinears
from wgc_models.layers.rope import apply_rope
from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata
from wgc_runtime.engines.kv_pool import PagedKVPool

# backends whose `decode` reads only metadata tensors (block_tables, kv_lens_t) and never
# synchronises with the host: safe inside a captured graph with static metadata buffers
CAPTURABLE_DECODE = frozenset({"triton"})


@dataclass(slots=True)
class StaticIndices:
    """What `StaticDecode.prepare` derives once per step for every layer's `StaticDecode.attend`
    (indices into the flat views of a pool layer)."""

    write: tuple[torch.Tensor, torch.Tensor]  # pool rows of this step's K, V
    gather: torch.Tensor  # int64 [2 * batch * kv_heads * len]: rows to attend (empty: `put`)
    bias: torch.Tensor  # [batch * kv_heads, 1, len]: 0, or -inf past a row's end
    # compiled steps: the pool tensor and (page, K/V half, offset) of this step's K then V rows,
    # written through the pool tensor itself (`StaticDecode.prepare` with ``through_pool``)
    put: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None


@dataclass(slots=True)
class StaticDecode:
    """Fixed-shape decode metadata (one query per row): graph-capturable.

    ``meta`` is set for capturable backends (their ``decode`` reads views of these buffers).
    Otherwise `prepare` derives, once per step, what every layer's `attend` needs.
    """

    block_tables: torch.Tensor  # int32 [batch, width]
    kv_lens: torch.Tensor  # int32 [batch], including this step's token (≥ 1, also on padding)
    meta: AttentionMetadata | None = None  # for capturable backends: views of the same buffers
    indices: StaticIndices | None = None  # set by `prepare`

    def prepare(
        self, slots: torch.Tensor, pool: PagedKVPool, dynamic: bool, through_pool: bool = False
    ) -> None:
        """Indices into the flat views of a pool layer (`attend`), the same for every layer.

        ``dynamic`` (eager on the CPU): attend only to the pages in use, up to the longest
        row (a cheap host read there); else the full static width, with no host sync.

        ``through_pool`` (a step compiled by `torch.compile`): this step's K/V are written with
        ONE ``index_put_`` on the pool tensor itself instead of ``index_copy_`` on a view of a
        layer. A compiler functionalises mutations; a mutated *view* is scattered back into its
        base by copying the whole base (measured: the whole pool copied twice per layer, slower
        than eager), while a mutation of the base is turned back into an in-place scatter.
        """
        ps, hk = pool.page_size, pool.kv_heads
        b, width = self.block_tables.shape
        if dynamic:
            width = min(width, max(1, -(-int(self.kv_lens.max()) // ps)))
        n = width * ps
        # K rows of a layer viewed as [pages * 2 * page_size, kv_heads, dim]; V is page_size on
        # (page * 2 * page_size + offset == slot + page * page_size)
        k_row = slots.long() + torch.div(slots, ps, rounding_mode="floor") * ps
        put = None
        if through_pool:
            page = torch.div(slots, ps, rounding_mode="floor").long()
            off = slots.long() - page * ps
            half = torch.zeros_like(page)
            put = (
                pool.kv,
                torch.cat((page, page)),
                torch.cat((half, half + 1)),
                torch.cat((off, off)),
            )
        # rows of the layer viewed as [pages * 2 * page_size * kv_heads, dim], ordered
        # [K/V, row, kv head, token]: one gather yields each head's keys contiguously (a
        # compiled step reads the pages through the page table instead: `_attend_pages`)
        if through_pool:
            gather = torch.empty(0, dtype=torch.long, device=pool.device)
        else:
            pages = self.block_tables[:, :width].long() * (2 * ps * hk)
            gather = (pages.view(1, b, 1, width, 1) + _offsets(ps, hk, pool.device)).view(-1)
        pos = torch.arange(n, device=pool.device)
        beyond = pos[None, :] >= self.kv_lens.long()[:, None]  # [batch, n]
        bias = torch.zeros((b, 1, 1, n), dtype=_attn_dtype(pool.dtype), device=pool.device)
        bias.masked_fill_(beyond.view(b, 1, 1, n), float("-inf"))
        bias = bias.expand(b, hk, 1, n).reshape(b * hk, 1, n)
        self.indices = StaticIndices((k_row, k_row + ps), gather, bias, put)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_layer: torch.Tensor,
        scale: float,
        layer: int = 0,
    ) -> torch.Tensor:
        """Write this step's ``k``/``v`` (``[batch, kv_heads, dim]``) and attend ``q``
        (``[batch, heads, dim]``) over each row's pages: ``[batch, heads, dim]``.
        ``kv_layer`` is pool layer ``layer``."""
        idx = self.indices
        if idx is None:
            raise RuntimeError("`StaticDecode.attend` before `prepare`: no indices for this step")
        b, h, d = q.shape
        hk = k.shape[1]
        if idx.put is not None:  # through the pool tensor (see `prepare`)
            pool_kv, page, half, off = idx.put
            at = (torch.full_like(page, layer), page, half, off)
            pool_kv.index_put_(at, torch.cat((k, v)).to(pool_kv.dtype))
            return self._attend_pages(q, pool_kv[layer], scale)
        else:
            flat = kv_layer.view(-1, hk, d)
            flat.index_copy_(0, idx.write[0], k.to(flat.dtype))
            flat.index_copy_(0, idx.write[1], v.to(flat.dtype))
        kv = kv_layer.view(-1, d).index_select(0, idx.gather)
        kv = kv.view(2, b * hk, -1, d).to(idx.bias.dtype)
        # a kv head's query heads become rows of one product against its keys: no K/V repeat
        qq = q.reshape(b * hk, h // hk, d).to(kv.dtype)
        s = torch.baddbmm(idx.bias, qq, kv[0].transpose(1, 2), alpha=scale)
        out = torch.bmm(s.softmax(-1), kv[1])
        return out.view(b, h, d).to(q.dtype)

    def _attend_pages(self, q: torch.Tensor, kv_layer: torch.Tensor, scale: float) -> torch.Tensor:
        """A compiled step's attention over each row's pages of ``kv_layer`` (``[pages, 2,
        page_size, kv_heads, dim]``): the scores and the weighted sum written as products and
        sums that read the pool through the page table, so inductor fuses the page lookup into
        its kernels: one index per page, not a gathered copy of every token's row (with an
        index computed per row) for two batched matrix products. Measured on Orpheus's tiny LM
        at batch 16 (`benchmarks/README.md`): a step with page tables of 160 tokens ~270 µs
        instead of ~490; the logits equal the gathered form's to ~1e-7."""
        idx = self.indices
        assert idx is not None
        b, h, d = q.shape
        _, _, ps, hk, _ = kv_layer.shape
        width = idx.bias.shape[-1] // ps
        g = h // hk
        table = self.block_tables[:, :width].long()
        pages = kv_layer[table].to(idx.bias.dtype)  # [b, w, 2, ps, hk, d]
        keys = pages[:, :, 0].permute(0, 3, 1, 2, 4)  # [b, hk, w, ps, d]
        values = pages[:, :, 1].permute(0, 3, 1, 2, 4)
        qq = q.reshape(b, hk, g, 1, 1, d).to(idx.bias.dtype)
        s = (qq * keys[:, :, None]).sum(-1).reshape(b, hk, g, width * ps) * scale
        s = s + idx.bias.view(b, hk, 1, width * ps)
        p = s.softmax(-1).view(b, hk, g, width, ps, 1)
        out = (p * values[:, :, None]).sum((3, 4))  # [b, hk, g, d]
        return out.reshape(b, h, d).to(q.dtype)


_OFFSETS: dict[tuple[int, int, torch.device], torch.Tensor] = {}


def _offsets(ps: int, hk: int, device: torch.device) -> torch.Tensor:
    """``[2, 1, kv_heads, 1, page_size]`` row offsets inside a page, for `StaticIndices.gather`:
    K or V (``kv · page_size · kv_heads``), token (``t · kv_heads``), head."""
    key = (ps, hk, device)
    off = _OFFSETS.get(key)
    if off is None:
        kv = torch.arange(2, device=device).view(2, 1, 1, 1, 1) * (ps * hk)
        head = torch.arange(hk, device=device).view(1, 1, hk, 1, 1)
        tok = torch.arange(ps, device=device).view(1, 1, 1, 1, ps) * hk
        off = _OFFSETS[key] = kv + head + tok
    return off


def _attn_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision K/V are attended in fp32 (like the torch backend)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def static_meta(bufs: Mapping[str, torch.Tensor], page_size: int) -> AttentionMetadata:
    """Metadata whose tensors are the static buffers (for backends in `CAPTURABLE_DECODE`,
    which read only ``block_tables`` and ``kv_lens_t``; the host fields are placeholders)."""
    b = bufs["tokens"].shape[0]
    zeros = torch.zeros(b + 1, dtype=torch.int32, device=bufs["tokens"].device)
    return AttentionMetadata(
        page_size=page_size,
        tables=((),) * b,
        q_lens=(1,) * b,
        kv_lens=(1,) * b,
        qo_indptr=zeros,
        kv_indptr=zeros,
        kv_indices=zeros[:0],
        kv_last_page_len=bufs["kv_lens"],
        kv_lens_t=bufs["kv_lens"],
        block_tables=bufs["block_tables"],
        positions=bufs["positions"],
        slot_mapping=bufs["slots"],
    )


@dataclass(slots=True)
class AttnStep:
    """Where one forward's K/V go (``slots``, one per token) and what its queries attend to:
    ``meta`` (the plain path) or ``static`` (the static decode path)."""

    pool: PagedKVPool
    backend: AttentionBackend
    slots: torch.Tensor
    meta: AttentionMetadata | None = None
    static: StaticDecode | None = None

    def max_positions(self) -> int:
        """How many positions this step's rotary table must cover (known on the host)."""
        if self.meta is not None:
            return self.meta.max_kv_len
        if self.static is not None:
            return self.static.block_tables.shape[1] * self.pool.page_size
        raise ValueError("an `AttnStep` needs `meta` (the plain path) or `static`")


class Attention(nn.Module):
    """Grouped-query self-attention of one layer (q/k/v biases for Qwen2) over pool layer
    ``index``."""

    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.index = index
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=cfg.o_bias)
        self._qkv = FusedLinears((self.q_proj, self.k_proj, self.v_proj))

    def attend(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], step: AttnStep
    ) -> torch.Tensor:
        """Attention before ``o_proj``: ``[tokens, heads * head_dim]``."""
        t, h, hk = x.shape[0], self.heads, self.kv_heads
        w, b = self._qkv.get()
        qkv = F.linear(x, w, b).view(t, h + 2 * hk, self.head_dim)
        qk = apply_rope(qkv[:, : h + hk], *rope)  # q and k rotated together
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + hk :]
        kv_layer = step.pool.layer(self.index)
        backend, static = step.backend, step.static
        if static is None:
            backend.write_kv(kv_layer, k, v, step.slots)
            out = backend.forward(q, kv_layer, step.meta)
        elif static.meta is None:
            out = static.attend(q, k, v, kv_layer, backend.scale, self.index)
        else:
            backend.write_kv(kv_layer, k, v, step.slots)
            out = backend.decode(q, kv_layer, static.meta)
        return out.reshape(t, h * self.head_dim)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], step: AttnStep
    ) -> torch.Tensor:
        return self.o_proj(self.attend(x, rope, step))
