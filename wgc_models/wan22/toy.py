"""Helpers for the examples' toy node implementations: deterministic stand-ins for real models.

Every toy computes its outputs from its inputs and the request with tiny torch ops (averages,
fixed linear maps); randomness is seeded from the request, so the reference interpreter and the
compiled runtime produce identical outputs. Only Wan2.2's nodes use them now; the model issues
replace them with real tiny models.
"""

from __future__ import annotations

import torch

from wgc_runtime.contract.node import CallContext


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
