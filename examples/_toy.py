"""Helpers for the examples' toy node implementations: deterministic stand-ins for real models.

Every toy computes its outputs from its inputs and the request with tiny torch ops (hashes,
averages, fixed linear maps); randomness is seeded from the request, so the reference
interpreter and the compiled runtime produce identical outputs. Kv-cache toys keep their context
in the runtime's paged KV cache (`ctx.kv`: `kv_rows` appends, `kv_summary` attends),
so every example exercises the KV engine the way a real model does. The model issues replace
them with real tiny models.
"""

from __future__ import annotations

import hashlib

import torch

from wgc_runtime.contract.node import CallContext, KvCache


def digest(*values: object) -> int:
    """A stable 62-bit hash of tensors, ints and strings (shape, dtype and content)."""
    h = hashlib.blake2b(digest_size=8)
    for v in values:
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.to(torch.float64).numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return int.from_bytes(h.digest()) >> 2


def fixed_matrix(rows: int, cols: int, salt: int = 0) -> torch.Tensor:
    """A fixed [rows, cols] f32 matrix with entries in [-1, 1] (no randomness)."""
    i = torch.arange(rows, dtype=torch.float32).unsqueeze(1)
    j = torch.arange(cols, dtype=torch.float32).unsqueeze(0)
    return torch.sin(0.7 * i + 1.3 * j + 0.1 * salt)


def pool_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Average ``x`` (any shape, first dim kept as the sequence) into ``rows`` feature rows of
    the flattened trailing features, as f32 [rows, features]."""
    flat = x.reshape(x.shape[0], -1).to(torch.float32) if x.dim() > 1 else x.float().reshape(-1, 1)
    chunks = torch.tensor_split(flat, rows, dim=0)
    return torch.stack([c.mean(0) if c.shape[0] else flat.new_zeros(flat.shape[1]) for c in chunks])


def embed(x: torch.Tensor, rows: int, dim: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """``rows`` embeddings of width ``dim``: pooled features through a fixed linear map."""
    pooled = pool_rows(x, rows)
    pooled = pooled / (pooled.abs().amax() + 1.0)
    return (pooled @ fixed_matrix(pooled.shape[1], dim, salt)).to(dtype)


def noise(shape: tuple[int, ...], ctx: CallContext, salt: str) -> torch.Tensor:
    """Standard normal noise every node of the request agrees on (seeded by request and salt)."""
    return torch.randn(shape, generator=ctx.generator(salt, per_call=False))


def eos_after(ctx: CallContext, default: int) -> int:
    """The toy's end-of-sequence step count: request option `eos_after` (toy only)."""
    return int(ctx.options.get("eos_after", default))


# ---------------------------------------------------------------- the KV cache (`ctx.kv`)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as f32 feature rows (its first dim; a scalar is one row; ids scaled into [0, 1))."""
    if x.dtype in (torch.int32, torch.int64, torch.uint8):
        x = (x % 997).to(torch.float32) / 997
    x = x.to(torch.float32)
    if x.dim() == 0:
        return x.reshape(1, 1)
    features = 1
    for d in x.shape[1:]:
        features *= d
    return x.reshape(x.shape[0], max(1, features))


def kv_rows(x: torch.Tensor, kv: KvCache, salt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Toy keys and values for the rows of ``x``: ``[layers, rows, kv_heads, head_dim]``, the
    rows' features through fixed maps (a different one per layer)."""
    feats = _rows(x)
    width = kv.kv_heads * kv.head_dim
    base = feats @ fixed_matrix(feats.shape[1], width, salt) / feats.shape[1] ** 0.5
    shape = (feats.shape[0], kv.kv_heads, kv.head_dim)
    k = torch.stack([torch.sin(base + 0.5 * i).reshape(shape) for i in range(kv.layers)])
    v = torch.stack([torch.cos(base - 0.5 * i).reshape(shape) for i in range(kv.layers)])
    return k, v


def kv_query(x: torch.Tensor, kv: KvCache, salt: int) -> torch.Tensor:
    """Toy queries for the rows of ``x``: ``[rows, kv_heads, head_dim]``."""
    feats = _rows(x)
    width = kv.kv_heads * kv.head_dim
    q = torch.tanh(feats @ fixed_matrix(feats.shape[1], width, salt + 100))
    return q.reshape(feats.shape[0], kv.kv_heads, kv.head_dim)


def kv_summary(kv: KvCache, x: torch.Tensor, salt: int, label: str | None = None) -> int:
    """A hash of what the last row of ``x`` (already appended) attends to in ``label``."""
    if x.dim() > 0 and x.shape[0] == 0:
        return digest("empty", kv.length(label))
    last = x[-1:] if x.dim() > 0 else x
    return digest(kv.attend(kv_query(last, kv, salt), label=label))
