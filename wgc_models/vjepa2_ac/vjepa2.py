"""The V-JEPA 2 video encoder: a ViT over tubelets with 3-D rotary attention.

Named like the ``encoder.`` subtree of transformers' ``VJEPA2Model`` (``embeddings.
patch_embeddings.proj`` — a ``Conv3d`` over ``tubelet × patch × patch`` — ``layer.{i}.norm1``,
``attention.{query,key,value,proj}``, ``norm2``, ``mlp.fc1`` / ``fc2``, ``layernorm``), so a
``VJEPA2Model`` checkpoint loads with the prefix ``encoder.`` (its predictor left out).

Rotary positions (`rotate_queries_or_keys`, V-JEPA's own layout, kept exactly): a token's
frame, row and column each rotate one third of the head (``2 · ((head_dim // 3) // 2)``
dimensions; the rest is left alone), frequencies ``10000^(-i / (D/2))``; the sines and
cosines are laid out ``[f0 … f(D/2-1), f0 … f(D/2-1)]`` while the rotated pairs are adjacent
``(x0, x1), (x2, x3) …`` — the reference's arrangement, which a checkpoint depends on.

V-JEPA 2-AC encodes each frame on its own (the frame repeated to a tubelet): `encode_frames`.
Pixels are resized to the crop size and normalised with ImageNet's mean and deviation, as
``VJEPA2VideoProcessor`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.invariant import Linear

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True, slots=True, kw_only=True)
class VJEPA2Config:
    """``VJEPA2Config``'s encoder fields."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    patch_size: int = 16
    crop_size: int = 256
    tubelet_size: int = 2
    in_chans: int = 3
    mlp_ratio: float = 4.0
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VJEPA2Config:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})

    @property
    def grid(self) -> int:
        return self.crop_size // self.patch_size

    @property
    def frame_tokens(self) -> int:
        return self.grid * self.grid


def rotate_queries_or_keys(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[..., N, D]`` by positions ``pos`` ``[N]`` (module docstring)."""
    d = x.shape[-1]
    omega = torch.arange(d // 2, dtype=x.dtype, device=x.device) / (d / 2.0)
    omega = 1.0 / 10000**omega
    freq = pos.to(x.dtype)[:, None] * omega  # [N, D/2]
    sin, cos = freq.sin().repeat(1, 2), freq.cos().repeat(1, 2)
    y1, y2 = torch.unbind(x.reshape(*x.shape[:-1], -1, 2), dim=-1)
    y = torch.stack((-y2, y1), dim=-1).flatten(-2)
    return x * cos + y * sin


def rotary_split(head_dim: int) -> int:
    """Dimensions each of frame, row and column rotates."""
    return int(2 * ((head_dim // 3) // 2))


def rotate_3d(x: torch.Tensor, frame: torch.Tensor, row: torch.Tensor, col: torch.Tensor):
    """``x`` ``[..., N, D]``: its first thirds rotated by frame, row and column."""
    s = rotary_split(x.shape[-1])
    parts = [
        rotate_queries_or_keys(x[..., :s], frame),
        rotate_queries_or_keys(x[..., s : 2 * s], row),
        rotate_queries_or_keys(x[..., 2 * s : 3 * s], col),
    ]
    if 3 * s < x.shape[-1]:
        parts.append(x[..., 3 * s :])
    return torch.cat(parts, dim=-1)


def video_pixels(video: torch.Tensor, size: int) -> torch.Tensor:
    """``u8 [F, H, W, 3]`` → ``f32 [F, 3, size, size]``: resized, ImageNet-normalised."""
    x = video.permute(0, 3, 1, 2).float() / 255.0
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


class _PatchEmbeddings(nn.Module):
    def __init__(self, cfg: VJEPA2Config):
        super().__init__()
        k = (cfg.tubelet_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_chans, cfg.hidden_size, kernel_size=k, stride=k)


class _Embeddings(nn.Module):
    def __init__(self, cfg: VJEPA2Config):
        super().__init__()
        self.tubelet = cfg.tubelet_size
        self.patch_embeddings = _PatchEmbeddings(cfg)

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        """``[B, T, C, H, W]`` → ``[B, tokens, hidden]`` (fewer frames than a tubelet are
        repeated, as HF does)."""
        x = video.permute(0, 2, 1, 3, 4)
        if x.shape[2] < self.tubelet:
            x = x.repeat(1, 1, self.tubelet, 1, 1)
        proj = self.patch_embeddings.proj
        return proj(x.to(proj.weight.dtype)).flatten(2).transpose(1, 2)


class _Attention(nn.Module):
    def __init__(self, cfg: VJEPA2Config):
        super().__init__()
        h = cfg.hidden_size
        self.heads, self.grid = cfg.num_attention_heads, cfg.grid
        self.query = Linear(h, h, bias=cfg.qkv_bias)
        self.key = Linear(h, h, bias=cfg.qkv_bias)
        self.value = Linear(h, h, bias=cfg.qkv_bias)
        self.proj = Linear(h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, -1).transpose(1, 2)

        ids = torch.arange(n, device=x.device)
        per_frame = self.grid * self.grid
        frame, rest = ids // per_frame, ids % per_frame
        row, col = rest // self.grid, rest % self.grid
        q = rotate_3d(split(self.query(x)), frame, row, col)
        k = rotate_3d(split(self.key(x)), frame, row, col)
        out = F.scaled_dot_product_attention(q, k, split(self.value(x)))
        return self.proj(out.transpose(1, 2).reshape(b, n, h))


class _Mlp(nn.Module):
    def __init__(self, dim: int, ratio: float):
        super().__init__()
        self.fc1 = Linear(dim, int(dim * ratio))
        self.fc2 = Linear(int(dim * ratio), dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class _Layer(nn.Module):
    def __init__(self, cfg: VJEPA2Config):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attention = _Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = _Mlp(cfg.hidden_size, cfg.mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VJEPA2Encoder(nn.Module):
    """``[B, T, 3, crop, crop]`` normalised video → ``[B, T / tubelet · grid², hidden]``."""

    def __init__(self, cfg: VJEPA2Config):
        super().__init__()
        self.config = cfg
        self.embeddings = _Embeddings(cfg)
        self.layer = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(video)
        for layer in self.layer:
            x = layer(x)
        return self.layernorm(x)

    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """Each of ``frames`` ``[F, 3, crop, crop]`` encoded alone (V-JEPA 2-AC): ``[F ·
        grid², hidden]``, frame-major."""
        clips = frames[:, None].repeat(1, self.config.tubelet_size, 1, 1, 1)
        return self(clips).reshape(-1, self.config.hidden_size)
