"""Wan's video VAE decoder (diffusers' ``AutoencoderKLWan``'s ``post_quant_conv`` and ``decoder``),
named as a diffusers ``vae/`` folder, decoding one latent frame at a time like the reference.

* `WanVaeConfig`: the ``config.json`` sizes (``base_dim``, ``decoder_base_dim``, ``z_dim``,
  ``dim_mult``, ``is_residual``, ``patch_size``, ...); `NAMED_VAE` holds the published ones
  (Wan2.1's VAE, used by A14B; Wan2.2's residual VAE with 2×2 patches, used by TI2V-5B).
* `WanVaeDecoder.decode(z [B, z_dim, F, H, W]) → video [B, C, 1 + 4·(F - 1), H·s, W·s]` in
  [-1, 1]: the latent frames go through the decoder one by one; every causal 3D convolution
  (time kernel 3, two frames of left context) keeps the last two frames it saw in a
  `FrameCache` local to the call, so frame k sees frames k-1 and k-2 exactly as one causal
  pass over the whole clip would. The first latent frame decodes to one video frame, each
  later one to four (the temporal upsamplers skip the first frame: their cache starts as
  "repeat", then zeros). Spatial upsampling is nearest-exact then a 3×3 convolution; Wan2.2's
  residual blocks add a channel-to-space duplicated shortcut around each upsampling stage.

Its half of a checkpoint loads in `wgc_models.wan22.checkpoint`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

# a temporal upsampler that has seen only the first chunk ("Rep" in the reference)
FrameCache = dict[nn.Module, torch.Tensor | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class WanVaeConfig:
    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    is_residual: bool = False
    in_channels: int = 3
    out_channels: int = 3
    patch_size: int | None = None
    latents_mean: tuple[float, ...] = ()
    latents_std: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WanVaeConfig:
        names = set(cls.__dataclass_fields__)
        kw: dict[str, Any] = {}
        for k, v in raw.items():
            if k in names:
                kw[k] = tuple(cast(list[Any], v)) if isinstance(v, list) else v
        return cls(**kw)

    @classmethod
    def from_folder(cls, path: str | Path) -> WanVaeConfig:
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))


NAMED_VAE: dict[str, WanVaeConfig] = {
    "wan2.1-vae": WanVaeConfig(),
    "wan2.2-vae": WanVaeConfig(
        base_dim=160,
        decoder_base_dim=256,
        z_dim=48,
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
    ),
}


class CausalConv3d(nn.Conv3d):
    """A 3D convolution padded by ``space`` on both sides of each frame and by ``2·time``
    frames on the left only; ``past`` frames, when given, stand in for that many of the left
    zeros."""

    def __init__(
        self,
        c_in: int,
        c_out: int,
        kernel: int | tuple[int, int, int],
        space: int = 0,
        time: int = 0,
        stride: int | tuple[int, int, int] = 1,
    ):
        super().__init__(c_in, c_out, kernel, stride=stride)  # pyright: ignore[reportUnknownMemberType] (stub: untyped device)
        self.space, self.left = space, 2 * time

    def forward(self, input: torch.Tensor, past: torch.Tensor | None = None) -> torch.Tensor:
        x, left = input, self.left
        if past is not None and left > 0:
            x = torch.cat([past.to(x.device), x], dim=2)
            left -= past.shape[2]
        p = self.space
        return super().forward(F.pad(x, (p, p, p, p, left, 0)))


def cached(conv: CausalConv3d, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
    """``conv`` over a chunk of frames with the last two frames it saw before as context."""
    past = cache.get(conv)
    keep = x[:, :, -2:]
    if keep.shape[2] < 2 and past is not None:
        keep = torch.cat([past[:, :, -1:], keep], dim=2)
    out = conv(x, past)
    cache[conv] = keep.clone()
    return out


class RMSNormC(nn.Module):
    """Channel-first RMS norm: ``x / ‖x‖₂ · √C · γ`` over the channel axis."""

    def __init__(self, dim: int, spatial_dims: int):
        super().__init__()
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.ones(dim, *([1] * spatial_dims)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=1) * self.scale * self.gamma


class ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.norm1 = RMSNormC(c_in, 3)
        self.conv1 = CausalConv3d(c_in, c_out, 3, 1, 1)
        self.norm2 = RMSNormC(c_out, 3)
        self.conv2 = CausalConv3d(c_out, c_out, 3, 1, 1)
        self.conv_shortcut = CausalConv3d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        skip = x if self.conv_shortcut is None else self.conv_shortcut(x)
        h = cached(self.conv1, F.silu(self.norm1(x)), cache)
        h = cached(self.conv2, F.silu(self.norm2(h)), cache)
        return h + skip


class AttnBlock(nn.Module):
    """Single-head self-attention over each frame's pixels."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = RMSNormC(dim, 2)
        self.to_qkv = nn.Conv2d(dim, 3 * dim, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        frames = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
        qkv = self.to_qkv(self.norm(frames)).reshape(b * t, 3 * c, h * w).transpose(1, 2)
        q, k, v = qkv[:, None].chunk(3, dim=-1)
        out = F.scaled_dot_product_attention(q, k, v)[:, 0].transpose(1, 2)
        out = self.proj(out.reshape(b * t, c, h, w))
        return out.view(b, t, c, h, w).permute(0, 2, 1, 3, 4) + x


class MidBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.resnets = nn.ModuleList([ResBlock(dim, dim), ResBlock(dim, dim)])
        self.attentions = nn.ModuleList([AttnBlock(dim)])

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        x = self.resnets[0](x, cache)
        return self.resnets[1](self.attentions[0](x), cache)


class Upsample(nn.Module):
    """2× in space (nearest-exact, then a 3×3 convolution per frame); with ``temporal``, first
    2× in time: a causal time convolution doubling the channels, interleaved into frames."""

    def __init__(self, dim: int, out_dim: int, temporal: bool):
        super().__init__()
        self.resample = nn.Sequential(nn.Upsample(scale_factor=2.0, mode="nearest-exact"))
        self.resample.append(nn.Conv2d(dim, out_dim, 3, padding=1))
        self.time_conv = CausalConv3d(dim, 2 * dim, (3, 1, 1), 0, 1) if temporal else None

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        if self.time_conv is not None:
            x = self._double_frames(self.time_conv, x, cache)
        b, c, t, h, w = x.shape
        y = self.resample[0](x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w).float())
        y = self.resample[1](y.type_as(x))
        return y.view(b, t, *y.shape[1:]).permute(0, 2, 1, 3, 4)

    @staticmethod
    def _double_frames(conv: CausalConv3d, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        if conv not in cache:  # the first chunk: one frame stays one frame
            cache[conv] = None
            return x
        past = cache[conv]
        keep = x[:, :, -2:]
        if keep.shape[2] < 2:
            first = torch.zeros_like(keep) if past is None else past[:, :, -1:]
            keep = torch.cat([first, keep], dim=2)
        y = conv(x, past)
        cache[conv] = keep.clone()
        b, c, t, h, w = x.shape
        y = y.reshape(b, 2, c, t, h, w)
        return torch.stack((y[:, 0], y[:, 1]), dim=3).reshape(b, c, 2 * t, h, w)


class DupUp(nn.Module):
    """Wan2.2's shortcut around an upsampling stage: channels repeated, then moved into
    ``factor_t × 2 × 2`` positions (the first chunk's extra leading frames dropped)."""

    def __init__(self, c_in: int, c_out: int, factor_t: int):
        super().__init__()
        self.c_out, self.factor_t = c_out, factor_t
        self.repeats = c_out * factor_t * 4 // c_in

    def forward(self, x: torch.Tensor, first: bool) -> torch.Tensor:
        b, _, t, h, w = x.shape
        ft = self.factor_t
        x = x.repeat_interleave(self.repeats, dim=1).view(b, self.c_out, ft, 2, 2, t, h, w)
        x = x.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, self.c_out, t * ft, h * 2, w * 2)
        return x[:, :, ft - 1 :] if first else x


class UpBlock(nn.Module):
    """``num_res_blocks + 1`` residual blocks then the stage's upsampler: Wan2.1's under
    ``upsamplers.0`` (halving the channels), Wan2.2's under ``upsampler`` with `DupUp`."""

    def __init__(self, c_in: int, c_out: int, n_res: int, up: str | None, residual: bool):
        super().__init__()
        dims = [c_in] + [c_out] * (n_res + 1)
        self.resnets = nn.ModuleList([ResBlock(a, b) for a, b in itertools.pairwise(dims)])
        temporal = up == "3d"
        self.residual = residual
        self.upsamplers = self.upsampler = self.avg_shortcut = None
        if up is not None and residual:
            self.upsampler = Upsample(c_out, c_out, temporal)
            self.avg_shortcut = DupUp(c_in, c_out, 2 if temporal else 1)
        elif up is not None:
            self.upsamplers = nn.ModuleList([Upsample(c_out, c_out // 2, temporal)])

    def forward(self, x: torch.Tensor, cache: FrameCache, first: bool) -> torch.Tensor:
        inp = x
        for res in self.resnets:
            x = res(x, cache)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x, cache)
        if self.upsampler is not None and self.avg_shortcut is not None:
            x = self.upsampler(x, cache) + self.avg_shortcut(inp, first)
        return x


class Decoder3d(nn.Module):
    def __init__(self, cfg: WanVaeConfig):
        super().__init__()
        base = cfg.decoder_base_dim or cfg.base_dim
        mult = cfg.dim_mult
        dims = [base * m for m in (mult[-1], *mult[::-1])]
        temporal_up = cfg.temperal_downsample[::-1]
        self.conv_in = CausalConv3d(cfg.z_dim, dims[0], 3, 1, 1)
        self.mid_block = MidBlock(dims[0])
        blocks: list[UpBlock] = []
        for i, (c_in, c_out) in enumerate(itertools.pairwise(dims)):
            if i > 0 and not cfg.is_residual:
                c_in //= 2
            last = i == len(mult) - 1
            up = None if last else "3d" if temporal_up[i] else "2d"
            blocks.append(UpBlock(c_in, c_out, cfg.num_res_blocks, up, cfg.is_residual))
        self.up_blocks = nn.ModuleList(blocks)
        self.norm_out = RMSNormC(dims[-1], 3)
        self.conv_out = CausalConv3d(dims[-1], cfg.out_channels, 3, 1, 1)

    def forward(self, x: torch.Tensor, cache: FrameCache, first: bool) -> torch.Tensor:
        x = self.mid_block(cached(self.conv_in, x, cache), cache)
        for block in self.up_blocks:
            x = block(x, cache, first)
        return cached(self.conv_out, F.silu(self.norm_out(x)), cache)


class WanVaeDecoder(nn.Module):
    def __init__(self, cfg: WanVaeConfig):
        super().__init__()
        self.cfg = cfg
        self.post_quant_conv = CausalConv3d(cfg.z_dim, cfg.z_dim, 1)
        self.decoder = Decoder3d(cfg)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Latents (already de-normalised: ``z·std + mean``) → video in [-1, 1]."""
        x = self.post_quant_conv(z)
        cache: FrameCache = {}
        frames = [self.decoder(x[:, :, i : i + 1], cache, i == 0) for i in range(x.shape[2])]
        out = torch.cat(frames, dim=2)
        p = self.cfg.patch_size
        if p is not None and p > 1:
            b, cpp, f, h, w = out.shape
            out = out.view(b, cpp // (p * p), p, p, f, h, w).permute(0, 1, 4, 5, 3, 6, 2)
            out = out.reshape(b, cpp // (p * p), f, h * p, w * p)
        return out.clamp(-1.0, 1.0)

    def denormalise(self, latents: torch.Tensor) -> torch.Tensor:
        """``z·std + mean`` per channel (the config's ``latents_std`` / ``latents_mean``)."""
        if not self.cfg.latents_mean:
            return latents
        shape = (1, -1, 1, 1, 1)
        mean = torch.tensor(self.cfg.latents_mean, dtype=latents.dtype).view(shape)
        std = torch.tensor(self.cfg.latents_std, dtype=latents.dtype).view(shape)
        return latents * std.to(latents.device) + mean.to(latents.device)
