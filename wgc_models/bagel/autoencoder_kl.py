"""The FLUX-style KL autoencoder BAGEL generates and edits images through.

Named like diffusers' ``AutoencoderKL`` (``encoder.conv_in``, ``encoder.down_blocks.{i}.resnets
.{j}.{norm1,conv1,norm2,conv2,conv_shortcut}``, ``….downsamplers.0.conv``, ``mid_block.resnets``
/ ``mid_block.attentions.0.{group_norm,to_q,to_k,to_v,to_out.0}``, ``conv_norm_out``,
``conv_out``; the decoder likewise with ``up_blocks`` and ``upsamplers``), so a diffusers
checkpoint loads by name. FLUX's configuration: 16 latent channels, no quant convolutions,
``scaling_factor`` 0.3611 and ``shift_factor`` 0.1159 (`VaeConfig.flux`).

`encode` returns the posterior's mean, scaled (``(z - shift) · scale``), not a sample:
deterministic, which serving wants; `decode` undoes the scaling. Pixels are ``[-1, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, slots=True, kw_only=True)
class VaeConfig:
    """``AutoencoderKL``'s config fields (FLUX's by default)."""

    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    latent_channels: int = 16
    norm_num_groups: int = 32
    scaling_factor: float = 0.3611
    shift_factor: float = 0.1159

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VaeConfig:
        if raw.get("use_quant_conv", False) or raw.get("use_post_quant_conv", False):
            raise ValueError("quant convolutions are not FLUX's: use_quant_conv must be false")
        kw = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        if "block_out_channels" in kw:
            kw["block_out_channels"] = tuple(kw["block_out_channels"])
        return cls(**kw)

    def diffusers(self) -> dict[str, Any]:
        """The ``AutoencoderKL(**...)`` arguments of this configuration."""
        n = len(self.block_out_channels)
        return {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "down_block_types": ["DownEncoderBlock2D"] * n,
            "up_block_types": ["UpDecoderBlock2D"] * n,
            "block_out_channels": list(self.block_out_channels),
            "layers_per_block": self.layers_per_block,
            "latent_channels": self.latent_channels,
            "norm_num_groups": self.norm_num_groups,
            "scaling_factor": self.scaling_factor,
            "shift_factor": self.shift_factor,
            "use_quant_conv": False,
            "use_post_quant_conv": False,
        }


def _norm(groups: int, ch: int) -> nn.GroupNorm:
    return nn.GroupNorm(groups, ch, eps=1e-6)


class Resnet(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int):
        super().__init__()
        self.norm1, self.conv1 = _norm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = _norm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class Attention(nn.Module):
    """One-head self-attention over the pixels of a feature map, with a residual."""

    def __init__(self, ch: int, groups: int):
        super().__init__()
        self.group_norm = _norm(groups, ch)
        self.to_q, self.to_k, self.to_v = nn.Linear(ch, ch), nn.Linear(ch, ch), nn.Linear(ch, ch)
        self.to_out = nn.ModuleList([nn.Linear(ch, ch)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.group_norm(x).view(b, c, h * w).transpose(1, 2)[:, None]  # [b, 1, hw, c]
        out = F.scaled_dot_product_attention(self.to_q(t), self.to_k(t), self.to_v(t))
        out = self.to_out[0](out[:, 0]).transpose(1, 2).reshape(b, c, h, w)
        return x + out


class MidBlock(nn.Module):
    def __init__(self, ch: int, groups: int):
        super().__init__()
        self.resnets = nn.ModuleList([Resnet(ch, ch, groups), Resnet(ch, ch, groups)])
        self.attentions = nn.ModuleList([Attention(ch, groups)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.resnets[0](x)
        return self.resnets[1](self.attentions[0](x))


class _Sampler(nn.Module):
    def __init__(self, ch: int, down: bool):
        super().__init__()
        self.down = down
        self.conv = nn.Conv2d(ch, ch, 3, stride=2 if down else 1, padding=0 if down else 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.down:
            return self.conv(F.pad(x, (0, 1, 0, 1)))
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Stage(nn.Module):
    def __init__(self, cin: int, cout: int, n: int, groups: int, sample: str | None):
        super().__init__()
        self.resnets = nn.ModuleList(
            Resnet(cin if i == 0 else cout, cout, groups) for i in range(n)
        )
        if sample == "down":
            self.downsamplers = nn.ModuleList([_Sampler(cout, down=True)])
        elif sample == "up":
            self.upsamplers = nn.ModuleList([_Sampler(cout, down=False)])
        self.sample = sample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for r in self.resnets:
            x = r(x)
        if self.sample == "down":
            x = self.downsamplers[0](x)
        elif self.sample == "up":
            x = self.upsamplers[0](x)
        return x


class Encoder(nn.Module):
    def __init__(self, cfg: VaeConfig):
        super().__init__()
        ch, g = cfg.block_out_channels, cfg.norm_num_groups
        self.conv_in = nn.Conv2d(cfg.in_channels, ch[0], 3, padding=1)
        last = len(ch) - 1
        self.down_blocks = nn.ModuleList(
            _Stage(ch[max(i - 1, 0)], ch[i], cfg.layers_per_block, g, None if i == last else "down")
            for i in range(len(ch))
        )
        self.mid_block = MidBlock(ch[-1], g)
        self.conv_norm_out = _norm(g, ch[-1])
        self.conv_out = nn.Conv2d(ch[-1], 2 * cfg.latent_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        x = self.mid_block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, cfg: VaeConfig):
        super().__init__()
        ch, g = tuple(reversed(cfg.block_out_channels)), cfg.norm_num_groups
        self.conv_in = nn.Conv2d(cfg.latent_channels, ch[0], 3, padding=1)
        self.mid_block = MidBlock(ch[0], g)
        last = len(ch) - 1
        self.up_blocks = nn.ModuleList(
            _Stage(
                ch[max(i - 1, 0)], ch[i], cfg.layers_per_block + 1, g, None if i == last else "up"
            )
            for i in range(len(ch))
        )
        self.conv_norm_out = _norm(g, ch[-1])
        self.conv_out = nn.Conv2d(ch[-1], cfg.out_channels, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.mid_block(self.conv_in(z))
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    """``encode``: pixels ``[B, 3, H, W]`` in ``[-1, 1]`` → scaled latents ``[B, C, H/8, W/8]``
    (FLUX: ``H/8`` for four stages); ``decode``: back."""

    def __init__(self, cfg: VaeConfig):
        super().__init__()
        self.config = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.encoder(x.to(self.encoder.conv_in.weight.dtype))[
            :, : self.config.latent_channels
        ]
        return (mean - self.config.shift_factor) * self.config.scaling_factor

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        z = z.to(self.decoder.conv_in.weight.dtype) / self.config.scaling_factor
        return self.decoder(z + self.config.shift_factor)
