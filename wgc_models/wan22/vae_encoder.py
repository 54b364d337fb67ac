"""Wan's video VAE encoder (diffusers' ``AutoencoderKLWan``'s ``encoder`` and ``quant_conv``),
named as a diffusers ``vae/`` folder, encoding the clip in causal chunks like the reference.

`WanVaeEncoder.encode(video [B, C, 1 + 4k, H, W] in [-1, 1]) → latent mean [B, z_dim, 1 + k,
H / s, W / s]` (the posterior's mode, what Wan's image-to-video pipelines take): the first
frame alone, then four frames at a time, through causal convolutions that keep their last two
input frames in a `FrameCache` local to the call (`wgc_models.wan22.vae`). Spatial
downsampling is a 3×3 stride-2 convolution after padding right and bottom by one; a temporal
one is a stride-2 time convolution over the previous chunk's last frame and this chunk's (the
first chunk passes through, kept). Wan2.2's residual layout wraps each stage in an averaging
space-and-time-to-channel shortcut, and its 2×2 patches are folded into channels first.

Its half of a checkpoint loads in `wgc_models.wan22.checkpoint`.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.wan22.vae import (
    CausalConv3d,
    FrameCache,
    MidBlock,
    ResBlock,
    RMSNormC,
    WanVaeConfig,
    cached,
)


class Downsample(nn.Module):
    """2× in space per frame; with ``temporal``, then 2× in time (see the module docstring)."""

    def __init__(self, dim: int, temporal: bool):
        super().__init__()
        self.resample = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(dim, dim, 3, stride=2))
        self.time_conv = CausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1)) if temporal else None

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        b, c, t, h, w = x.shape
        y = self.resample(x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w))
        y = y.view(b, t, *y.shape[1:]).permute(0, 2, 1, 3, 4)
        conv = self.time_conv
        if conv is None:
            return y
        if conv not in cache:  # the first chunk passes through, kept
            cache[conv] = y.clone()
            return y
        past = cache[conv]
        assert past is not None
        cache[conv] = y[:, :, -1:].clone()
        return conv(torch.cat([past[:, :, -1:], y], dim=2))


def _avg_down(x: torch.Tensor, c_out: int, ft: int, fs: int) -> torch.Tensor:
    """Wan2.2's shortcut: ``ft × fs × fs`` neighbourhoods into channels (time padded on the
    left to a multiple of ``ft``), then groups of channels averaged down to ``c_out``."""
    x = F.pad(x, (0, 0, 0, 0, (ft - x.shape[2] % ft) % ft, 0))
    b, c, t, h, w = x.shape
    x = x.view(b, c, t // ft, ft, h // fs, fs, w // fs, fs).permute(0, 1, 3, 5, 7, 2, 4, 6)
    x = x.reshape(b, c_out, c * ft * fs * fs // c_out, t // ft, h // fs, w // fs)
    return x.mean(dim=2)


class ResidualDownBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, n_res: int, temporal: bool, down: bool):
        super().__init__()
        dims = [c_in] + [c_out] * n_res
        self.resnets = nn.ModuleList([ResBlock(a, b) for a, b in itertools.pairwise(dims)])
        self.downsampler = Downsample(c_out, temporal) if down else None
        self.c_out, self.ft, self.fs = c_out, 2 if temporal else 1, 2 if down else 1

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        inp = x
        for res in self.resnets:
            x = res(x, cache)
        if self.downsampler is not None:
            x = self.downsampler(x, cache)
        return x + _avg_down(inp, self.c_out, self.ft, self.fs)


class Encoder3d(nn.Module):
    def __init__(self, cfg: WanVaeConfig):
        super().__init__()
        mult = cfg.dim_mult
        dims = [cfg.base_dim * m for m in (1, *mult)]
        self.conv_in = CausalConv3d(cfg.in_channels, dims[0], 3, 1, 1)
        blocks: list[nn.Module] = []
        for i, (c_in, c_out) in enumerate(itertools.pairwise(dims)):
            last = i == len(mult) - 1
            temporal = not last and cfg.temperal_downsample[i]
            if cfg.is_residual:
                blocks.append(
                    ResidualDownBlock(c_in, c_out, cfg.num_res_blocks, temporal, not last)
                )
                continue
            for j in range(cfg.num_res_blocks):
                blocks.append(ResBlock(c_in if j == 0 else c_out, c_out))
            if not last:
                blocks.append(Downsample(c_out, temporal))
        self.down_blocks = nn.ModuleList(blocks)
        self.mid_block = MidBlock(dims[-1])
        self.norm_out = RMSNormC(dims[-1], 3)
        self.conv_out = CausalConv3d(dims[-1], 2 * cfg.z_dim, 3, 1, 1)

    def forward(self, x: torch.Tensor, cache: FrameCache) -> torch.Tensor:
        x = cached(self.conv_in, x, cache)
        for block in self.down_blocks:
            x = block(x, cache)
        x = self.mid_block(x, cache)
        return cached(self.conv_out, F.silu(self.norm_out(x)), cache)


class WanVaeEncoder(nn.Module):
    def __init__(self, cfg: WanVaeConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder3d(cfg)
        self.quant_conv = CausalConv3d(2 * cfg.z_dim, 2 * cfg.z_dim, 1)

    def encode(self, video: torch.Tensor) -> torch.Tensor:
        """Video in [-1, 1] (``1 + 4k`` frames) → the latents' mean (not normalised)."""
        p = self.cfg.patch_size
        if p is not None and p > 1:
            b, c, f, h, w = video.shape
            video = video.view(b, c, f, h // p, p, w // p, p).permute(0, 1, 6, 4, 2, 3, 5)
            video = video.reshape(b, c * p * p, f, h // p, w // p)
        cache: FrameCache = {}
        chunks = [video[:, :, :1]]
        chunks += [video[:, :, i : i + 4] for i in range(1, video.shape[2], 4)]
        out = torch.cat([self.encoder(chunk, cache) for chunk in chunks], dim=2)
        return self.quant_conv(out)[:, : self.cfg.z_dim]

    def normalise(self, mean: torch.Tensor) -> torch.Tensor:
        """``(z - mean) / std`` per channel (the config's ``latents_mean`` / ``latents_std``):
        the latent the transformer sees."""
        if not self.cfg.latents_mean:
            return mean
        shape = (1, -1, 1, 1, 1)
        mu = torch.tensor(self.cfg.latents_mean, dtype=mean.dtype, device=mean.device).view(shape)
        std = torch.tensor(self.cfg.latents_std, dtype=mean.dtype, device=mean.device).view(shape)
        return (mean - mu) * (1.0 / std)
