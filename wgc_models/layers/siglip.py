"""The SigLIP vision transformer (BAGEL's ViT, PaliGemma's and so π0/π0.5's vision tower).

Named like transformers' ``SiglipVisionModel`` as it saves itself (``embeddings.patch_embedding``,
``embeddings.position_embedding``, ``encoder.layers.{i}.layer_norm1`` / ``self_attn.{q,k,v,
out}_proj`` / ``layer_norm2`` / ``mlp.fc1`` / ``mlp.fc2``, ``post_layernorm``), so a checkpoint
of it, or the ``vision_tower.`` subtree of a PaliGemma / π0 checkpoint, loads by name. No
pooling head (BAGEL and PaliGemma use the patch tokens). Images are resized to the
configuration's ``image_size`` and normalised as SigLIP's processor does (``x / 127.5 - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.invariant import Linear


@dataclass(frozen=True, slots=True, kw_only=True)
class SiglipConfig:
    """``SiglipVisionConfig``'s fields the encoder needs."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    image_size: int
    patch_size: int
    num_channels: int = 3
    layer_norm_eps: float = 1e-6

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SiglipConfig:
        names = cls.__dataclass_fields__
        return cls(**{k: raw[k] for k in names if k in raw})

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def pixels(images: torch.Tensor, size: int) -> torch.Tensor:
    """``u8 [N, H, W, 3]`` (or one ``[H, W, 3]``) → SigLIP's input ``f32 [N, 3, size, size]``:
    resized (bilinear) when not already ``size`` square, scaled to ``[-1, 1]``."""
    x = images if images.dim() == 4 else images[None]
    x = x.permute(0, 3, 1, 2).float() / 255.0
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x * 2.0 - 1.0


class _Embeddings(nn.Module):
    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        self.patch_embedding = nn.Conv2d(
            cfg.num_channels, cfg.hidden_size, cfg.patch_size, stride=cfg.patch_size
        )
        self.position_embedding = nn.Embedding(cfg.num_patches, cfg.hidden_size)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.patch_embedding(x.to(self.patch_embedding.weight.dtype))
        x = x.flatten(2).transpose(1, 2)
        if position_ids is None:  # the full square grid: every position, in order
            return x + self.position_embedding.weight
        return x + self.position_embedding(position_ids.to(x.device))


class _Attention(nn.Module):
    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        h = cfg.hidden_size
        self.heads = cfg.num_attention_heads
        self.q_proj, self.k_proj = Linear(h, h), Linear(h, h)
        self.v_proj, self.out_proj = Linear(h, h), Linear(h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, -1).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h))


class _Mlp(nn.Module):
    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        self.fc1 = Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class _Layer(nn.Module):
    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.self_attn = _Attention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = _Mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class _Encoder(nn.Module):
    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_hidden_layers))


class SiglipVision(nn.Module):
    """``[N, 3, image_size, image_size]`` normalised pixels → patch tokens ``[N, patches,
    hidden]`` (after ``post_layernorm``: ``SiglipVisionModel``'s ``last_hidden_state``)."""

    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = _Embeddings(cfg)
        self.encoder = _Encoder(cfg)
        self.post_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(
        self, pixel_values: torch.Tensor, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``position_ids`` (one per patch, row-major) place the patches of an image that is not
        the full ``image_size`` square in the position table (BAGEL's native-resolution ViT);
        without them the image is the square."""
        x = self.embeddings(pixel_values, position_ids)
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)
