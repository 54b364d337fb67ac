"""Rotary position embeddings: inverse frequencies with the config's scaling, a table of cos /
signed sin by position, and the rotation of q and k (rotate-half layout, like HF)."""

from __future__ import annotations

import math

import torch

from wgc_models.layers.config import DecoderConfig


def inv_freq(cfg: DecoderConfig) -> torch.Tensor:
    """Rotary inverse frequencies (fp32, ``[head_dim / 2]``), with the config's scaling."""
    d = cfg.head_dim
    freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if cfg.rope_type == "linear":
        return freq / cfg.rope_factor
    if cfg.rope_type == "llama3":
        low = cfg.rope_original_max_pos / cfg.rope_low_freq_factor
        high = cfg.rope_original_max_pos / cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / freq
        scaled = torch.where(wavelen > low, freq / cfg.rope_factor, freq)
        smooth = (cfg.rope_original_max_pos / wavelen - cfg.rope_low_freq_factor) / (
            cfg.rope_high_freq_factor - cfg.rope_low_freq_factor
        )
        mid = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
        is_mid = (wavelen >= high) & (wavelen <= low)
        return torch.where(is_mid, mid, scaled)
    return freq


class RopeTable:
    """cos and *signed* sin of every position below ``size`` (``[size, head_dim]``, computed
    in fp32 like HF, then cast): a step looks its positions up instead of recomputing them.

    HF rotates with ``rotate_half(x) = cat(-x[half:], x[:half])``. With
    ``ssin = (-sin[:half], sin[half:])``, ``rotate_half(x) · sin == roll(x, half) · ssin``
    exactly (a sign flip is exact), so rotating is ``x · cos + roll(x) · ssin``.
    """

    def __init__(self, inv: torch.Tensor, size: int, dtype: torch.dtype):
        half = inv.shape[0]
        freqs = torch.arange(size, device=inv.device).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin()
        sin[:, :half].neg_()
        self.size, self.half, self.dtype, self.device = size, half, dtype, inv.device
        self.cos, self.ssin = emb.cos().to(dtype), sin.to(dtype)

    def lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``, ``ssin`` of ``[tokens, 1, head_dim]`` for ``positions``."""
        return (
            self.cos.index_select(0, positions)[:, None, :],
            self.ssin.index_select(0, positions)[:, None, :],
        )


def apply_rope(x: torch.Tensor, cos: torch.Tensor, ssin: torch.Tensor) -> torch.Tensor:
    """``x · cos + rotate_half(x) · sin`` for ``x`` ``[tokens, heads, head_dim]``."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), ssin)
