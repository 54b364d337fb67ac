"""The reference backend: gather pages, then plain attention math in torch.

Runs on the CPU and on a GPU. Prefill goes one sequence at a time (ragged query lengths) through
`torch.nn.functional.scaled_dot_product_attention` with an explicit bottom-right causal mask.
Decode (one query per sequence) is batched into one masked softmax(q·Kᵀ)·V per layer, written
as matrix products so that each kv head's K/V is read once for all its grouped query heads, in
one of two layouts:

* **shared pages** (the CFG case: labels forked from ``main`` share its full pages): gather each
  distinct page once; the query rows of every sequence attend to the distinct pages, each row
  masked to its own pages. The common prefix is read once for all branches.
* **padded**: gather each sequence's pages into ``[batch, max_pages * page_size]`` and mask the
  tail. Chosen when sequences share little (distinct pages > 2 × the longest table), where the
  shared layout would compute ``batch ×`` more scores than it saves in copying.

Gathers go into per-backend workspaces that are reused across steps (no fresh allocation per
step, unlike a dense cache grown by ``torch.cat``). Half-precision pools are attended in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata


class TorchAttention(AttentionBackend):
    name = "torch"

    def __init__(self, **kw):
        super().__init__(**kw)
        self._work: dict[str, torch.Tensor] = {}
        self._plan: tuple | None = None

    # ------------------------------------------------------------------ planning

    def plan(self, meta: AttentionMetadata) -> None:
        """Derive the decode layout once per batch (every layer reuses it)."""
        super().plan(meta)
        self._plan = self._decode_plan(meta) if meta.is_decode else None

    def _decode_plan(self, meta: AttentionMetadata) -> tuple:
        ps = self.page_size
        longest = max((len(t) for t in meta.tables), default=1)
        uniq, inverse = torch.unique(meta.kv_indices.long(), return_inverse=True)
        if meta.batch > 1 and len(uniq) <= 2 * longest:
            # row b may see token t of distinct page u iff b holds u and t is filled in b's table
            counts = torch.diff(meta.kv_indptr.long())
            owner = torch.repeat_interleave(torch.arange(meta.batch, device=counts.device), counts)
            last = torch.zeros_like(inverse, dtype=torch.bool)
            last[meta.kv_indptr.long()[1:] - 1] = True
            valid = torch.where(last, meta.kv_last_page_len.long()[owner], ps)
            tok = torch.arange(ps, device=valid.device)[None, :] < valid[:, None]  # [nnz, ps]
            mask = torch.zeros((meta.batch, len(uniq), ps), dtype=torch.bool, device=tok.device)
            mask[owner, inverse] = tok
            return ("shared", uniq, mask.view(1, 1, meta.batch, -1))  # [., ., batch, n]
        idx = meta.block_tables.long().flatten()
        width = meta.block_tables.shape[1] * ps
        pos = torch.arange(width, device=idx.device)
        mask = pos[None, :] < meta.kv_lens_t.long()[:, None]  # [batch, width]
        return ("padded", idx, mask.view(meta.batch, 1, 1, width))  # [batch, ., ., width]

    def _gather(self, kv_layer: torch.Tensor, which: int, idx: torch.Tensor) -> torch.Tensor:
        """Pages ``idx`` of K (0) or V (1) as ``[n * page_size, kv_heads, dim]``, into a reused
        workspace."""
        src = kv_layer[:, which]
        shape = (len(idx), *src.shape[1:])
        key = f"{which}"
        buf = self._work.get(key)
        if buf is None or buf.numel() < _numel(shape) or buf.dtype != src.dtype:
            buf = self._work[key] = torch.empty(_numel(shape), dtype=src.dtype, device=src.device)
        out = buf[: _numel(shape)].view(shape)
        torch.index_select(src, 0, idx, out=out)
        return out.view(-1, *src.shape[2:])

    # ------------------------------------------------------------------ attention

    def decode(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        if self._plan is None or self.meta is not meta:
            self.plan(meta)
        if self._plan is None:  # `plan` makes a decode layout only for one query per sequence
            raise ValueError(f"decode needs one query per sequence, got q_lens {meta.q_lens}")
        kind, idx, mask = self._plan
        hk, g, d, b = self.num_kv_heads, self.group, self.head_dim, meta.batch
        k = _upcast(self._gather(kv_layer, 0, idx).transpose(0, 1))  # [kv_heads, n, dim]
        v = _upcast(self._gather(kv_layer, 1, idx).transpose(0, 1))
        qf = q.to(k.dtype)
        if kind == "shared":
            # every (group head, sequence) query row of a kv head in ONE matrix product against
            # the distinct pages: shared prefix pages and GQA groups are read once
            qq = qf.view(b, hk, g, d).permute(1, 2, 0, 3).reshape(hk, g * b, d)
            s = torch.bmm(qq, k.transpose(1, 2)).mul_(self.scale).view(hk, g, b, -1)
            s.masked_fill_(~mask, float("-inf"))
            o = torch.bmm(s.softmax(-1).view(hk, g * b, -1), v)  # [kv_heads, g * b, dim]
            return o.view(hk, g, b, d).permute(2, 0, 1, 3).reshape(b, hk * g, d).to(q.dtype)
        # per sequence: a 4-d matmul over these strided views would copy K and V first
        k, v = k.view(hk, b, -1, d), v.view(hk, b, -1, d)
        qq = qf.view(b, hk, g, d)
        out = torch.empty((b, hk, g, d), dtype=k.dtype, device=k.device)
        for i in range(b):
            s = torch.bmm(qq[i], k[:, i].transpose(1, 2)).mul_(self.scale)  # [kv_heads, g, w]
            s.masked_fill_(~mask[i], float("-inf"))
            torch.bmm(s.softmax(-1), v[:, i], out=out[i])
        return out.view(b, hk * g, d).to(q.dtype)

    def prefill(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        ps, start = self.page_size, 0
        for table, q_len, kv_len in zip(meta.tables, meta.q_lens, meta.kv_lens, strict=True):
            idx = torch.tensor(table, dtype=torch.long, device=kv_layer.device)
            k = kv_layer[idx, 0].reshape(len(table) * ps, *kv_layer.shape[3:])[:kv_len]
            v = kv_layer[idx, 1].reshape(len(table) * ps, *kv_layer.shape[3:])[:kv_len]
            qq = q[start : start + q_len].to(k.dtype).transpose(0, 1).unsqueeze(0)
            mask = None
            if q_len > 1:  # bottom-right causal: query i sits at kv_len - q_len + i
                rows = torch.arange(kv_len - q_len, kv_len, device=q.device)
                mask = torch.arange(kv_len, device=q.device)[None, :] <= rows[:, None]
            o = self._sdpa(qq, k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0), mask)
            out[start : start + q_len] = o[0].transpose(0, 1).to(q.dtype)
            start += q_len
        return out

    def _sdpa(self, q, k, v, mask) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.group > 1
        )


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision K/V are attended in fp32 (the reference is the accurate one)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
