"""Wan's diffusion transformer (diffusers' ``WanTransformer3DModel``), named parameter for
parameter as a diffusers ``transformer/`` folder so its safetensors load strictly.

* `WanDitConfig`: the sizes of the folder's ``config.json`` (``num_attention_heads``,
  ``attention_head_dim``, ``in_channels``, ...), and the published models' sizes as named
  configs (`NAMED`: Wan2.2 TI2V-5B, T2V-A14B and I2V-A14B experts).
* `WanTransformer`: a 3D patch embedding (a strided ``Conv3d``), the timestep's sinusoidal
  embedding through an MLP into six modulation vectors per block, the text states through a
  GELU projection, then per block: adaptive-LayerNorm self-attention with RMS-normalised q/k
  and 3D rotary positions (frame, row, column sharing the head's channels), cross-attention to
  the text, a tanh-GELU feed-forward; a modulated output norm, a linear and the unpatchify.
  The timestep is one per sample (``[B]``) or, as Wan2.2 TI2V gives it, one per latent token
  (``[B, tokens]``).

Arithmetic follows the reference's: LayerNorms and the modulation in fp32, the rotary tables
computed in fp64 and used in fp32, q/k rotated as interleaved (even, odd) channel pairs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class WanConfigError(ValueError):
    """A ``config.json`` this implementation does not run (unknown keys' values, CLIP image
    conditioning of Wan2.1 I2V)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WanDitConfig:
    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    eps: float = 1e-6
    rope_max_seq_len: int = 1024

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WanDitConfig:
        for key in ("image_dim", "added_kv_proj_dim", "pos_embed_seq_len"):
            if raw.get(key) is not None:
                raise WanConfigError(f"`{key}` (Wan2.1's CLIP image conditioning) is not supported")
        if raw.get("qk_norm", "rms_norm_across_heads") != "rms_norm_across_heads":
            raise WanConfigError(f"qk_norm {raw['qk_norm']!r}: only 'rms_norm_across_heads' is run")
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in raw.items() if k in names}
        if "patch_size" in kw:
            kw["patch_size"] = tuple(kw["patch_size"])
        if kw.get("out_channels") is None:
            kw["out_channels"] = kw.get("in_channels", cls.in_channels)
        return cls(**kw)

    @classmethod
    def from_folder(cls, path: str | Path) -> WanDitConfig:
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))


# The published Wan2.2 transformers (diffusers' ``transformer/config.json``); A14B has two
# experts (``transformer`` and ``transformer_2``) of the same size.
NAMED: dict[str, WanDitConfig] = {
    "wan2.2-ti2v-5b": WanDitConfig(
        num_attention_heads=24, in_channels=48, out_channels=48, ffn_dim=14336, num_layers=30
    ),
    "wan2.2-t2v-a14b": WanDitConfig(),
    "wan2.2-i2v-a14b": WanDitConfig(in_channels=36, out_channels=16),
}


def _layer_norm(x: torch.Tensor, eps: float, affine: nn.LayerNorm | None = None) -> torch.Tensor:
    """LayerNorm in fp32 (diffusers' ``FP32LayerNorm``), cast back to the input's dtype."""
    w = None if affine is None else affine.weight.float()
    b = None if affine is None else affine.bias.float()
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps).to(x.dtype)


def timestep_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """The sinusoidal timestep features, cosines first: ``[cos(t·f), sin(t·f)]`` with
    ``f_i = 10000^(-i / (dim/2))``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = t.float()[:, None] * freqs.to(t.device)[None, :]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class _TwoLinear(nn.Module):
    """``linear_2(act(linear_1(x)))`` (diffusers' ``TimestepEmbedding`` and
    ``PixArtAlphaTextProjection`` share the names)."""

    def __init__(self, n_in: int, n_out: int, act: nn.Module):
        super().__init__()
        self.linear_1 = nn.Linear(n_in, n_out)
        self.act = act
        self.linear_2 = nn.Linear(n_out, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


class _ConditionEmbedder(nn.Module):
    def __init__(self, cfg: WanDitConfig):
        super().__init__()
        d = cfg.inner_dim
        self.freq_dim = cfg.freq_dim
        self.time_embedder = _TwoLinear(cfg.freq_dim, d, nn.SiLU())
        self.time_proj = nn.Linear(d, 6 * d)
        self.text_embedder = _TwoLinear(cfg.text_dim, d, nn.GELU(approximate="tanh"))


class _Attention(nn.Module):
    """Multi-head attention with q/k RMS-normalised across all heads (``norm_q``/``norm_k``);
    ``context`` given = cross-attention (no rotation)."""

    def __init__(self, dim: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim)])
        self.norm_q = nn.RMSNorm(dim, eps=eps)
        self.norm_k = nn.RMSNorm(dim, eps=eps)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        src = x if context is None else context
        q = self.norm_q(self.to_q(x)).unflatten(2, (self.heads, -1))
        k = self.norm_k(self.to_k(src)).unflatten(2, (self.heads, -1))
        v = self.to_v(src).unflatten(2, (self.heads, -1))
        if rotary is not None:
            q, k = _rotate(q, *rotary), _rotate(k, *rotary)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        )
        return self.to_out[0](out.transpose(1, 2).flatten(2).type_as(x))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved channel pairs ``(x[2i], x[2i+1])`` by the angle whose cos/sin are
    ``cos[..., i]``/``sin[..., i]`` (``[tokens, 1, head_dim / 2]``)."""
    xf = x.float()
    even, odd = torch.unbind(xf.reshape(*xf.shape[:-1], -1, 2), -1)
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.flatten(-2).type_as(x)


def rotary_tables(
    cfg: WanDitConfig, grid: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cos and sin of each latent token's rotation, ``[f·h·w, 1, head_dim / 2]`` (fp32): the
    head's channel pairs split among frame, row and column (``h = w = 2·(head_dim // 6)``
    channels, the frame axis the rest), each axis with its own ``10000^(-2i / axis_dim)``."""
    d = cfg.attention_head_dim
    hw = 2 * (d // 6)
    if max(grid) > cfg.rope_max_seq_len:
        raise WanConfigError(f"latent grid {grid} exceeds rope_max_seq_len {cfg.rope_max_seq_len}")
    parts: list[torch.Tensor] = []
    for axis, (n, axis_dim) in enumerate(zip(grid, (d - 2 * hw, hw, hw), strict=True)):
        inv = 1.0 / (10000.0 ** (torch.arange(0, axis_dim, 2, dtype=torch.float64) / axis_dim))
        ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
        shape = [1, 1, 1, ang.shape[1]]
        shape[axis] = n
        parts.append(ang.view(shape).expand(*grid, ang.shape[1]))
    angles = torch.cat(parts, dim=-1).reshape(math.prod(grid), 1, -1)
    return torch.cos(angles).float(), torch.sin(angles).float()


class _GeluProj(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.proj = nn.Linear(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class _FeedForward(nn.Module):
    """``net.2(gelu_tanh(net.0.proj(x)))`` (diffusers' ``FeedForward`` names)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(_GeluProj(dim, hidden), nn.Identity(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class WanBlock(nn.Module):
    def __init__(self, cfg: WanDitConfig):
        super().__init__()
        d = cfg.inner_dim
        self.eps = cfg.eps
        self.attn1 = _Attention(d, cfg.num_attention_heads, cfg.eps)
        self.attn2 = _Attention(d, cfg.num_attention_heads, cfg.eps)
        self.norm2 = nn.LayerNorm(d, eps=cfg.eps) if cfg.cross_attn_norm else None
        self.ffn = _FeedForward(d, cfg.ffn_dim)
        self.scale_shift_table = nn.Parameter(torch.zeros(1, 6, d))

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        mod: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """``mod``: ``[B, 6, D]`` or, per token, ``[B, tokens, 6, D]``."""
        table = self.scale_shift_table if mod.dim() == 3 else self.scale_shift_table[None]
        terms = (table + mod.float()).unbind(dim=-2)
        shift, scale, gate, c_shift, c_scale, c_gate = (
            t if mod.dim() == 4 else t[:, None] for t in terms
        )
        h = (_layer_norm(x.float(), self.eps) * (1 + scale) + shift).type_as(x)
        x = (x.float() + self.attn1(h, rotary=rotary) * gate).type_as(x)
        h = x if self.norm2 is None else _layer_norm(x.float(), self.eps, self.norm2).type_as(x)
        x = x + self.attn2(h, context=context)
        h = (_layer_norm(x.float(), self.eps) * (1 + c_scale) + c_shift).type_as(x)
        return (x.float() + self.ffn(h).float() * c_gate).type_as(x)


class WanTransformer(nn.Module):
    """``forward(latents [B, C, F, H, W], timestep [B] or [B, tokens], text [B, L, text_dim])
    → [B, out_channels, F, H, W]`` (the flow-matching velocity)."""

    def __init__(self, cfg: WanDitConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.inner_dim
        self.patch_embedding = nn.Conv3d(
            cfg.in_channels, d, kernel_size=cfg.patch_size, stride=cfg.patch_size
        )
        self.condition_embedder = _ConditionEmbedder(cfg)
        self.blocks = nn.ModuleList([WanBlock(cfg) for _ in range(cfg.num_layers)])
        self.proj_out = nn.Linear(d, cfg.out_channels * math.prod(cfg.patch_size))
        self.scale_shift_table = nn.Parameter(torch.zeros(1, 2, d))

    def forward(
        self, latents: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor
    ) -> torch.Tensor:
        cfg = self.cfg
        b, _, f, h, w = latents.shape
        pt, ph, pw = cfg.patch_size
        grid = (f // pt, h // ph, w // pw)
        cos, sin = rotary_tables(cfg, grid)
        rotary = (cos.to(latents.device), sin.to(latents.device))
        x = self.patch_embedding(latents).flatten(2).transpose(1, 2).contiguous()

        emb = self.condition_embedder
        feats = timestep_features(timestep.flatten(), cfg.freq_dim)
        dtype = emb.time_embedder.linear_1.weight.dtype
        temb = emb.time_embedder(feats.to(dtype)).type_as(text)
        mod = emb.time_proj(F.silu(temb))
        if timestep.dim() == 2:  # one timestep per token (TI2V)
            temb = temb.unflatten(0, tuple(timestep.shape))
            mod = mod.unflatten(0, tuple(timestep.shape)).unflatten(-1, (6, -1))
        else:
            mod = mod.unflatten(-1, (6, -1))
        context = emb.text_embedder(text)

        for block in self.blocks:
            x = block(x, context, mod, rotary)

        table = self.scale_shift_table if temb.dim() == 2 else self.scale_shift_table[None]
        shift, scale = (table + temb.unsqueeze(-2)).unbind(dim=-2)
        if temb.dim() == 2:
            shift, scale = shift[:, None], scale[:, None]
        x = (_layer_norm(x.float(), cfg.eps) * (1 + scale) + shift).type_as(x)
        x = self.proj_out(x)
        x = x.reshape(b, *grid, pt, ph, pw, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, -1, f, h, w)
