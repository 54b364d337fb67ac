"""Qwen3-Omni's Code2Wav: codec frames (``num_quantizers`` codes each, 12.5 per second) to a
24 kHz waveform, causal, decoded a chunk at a time with left context.

Names as HF's ``Qwen3OmniMoeCode2Wav`` under ``code2wav.``. The codes of a frame are embedded
(``code_embedding``, one table for all quantizers, offset by ``q · codebook_size``) and
averaged; ``pre_transformer`` is a sliding-window causal transformer (each frame attends to
itself and the ``sliding_window − 1`` frames before it; RMSNorm, no q/k norm, layer-scaled
residuals); ``upsample`` alternates causal transposed convolutions and ConvNeXt blocks;
``decoder`` is a causal convolution, one block per ``upsample_rates`` entry (SnakeBeta, a causal
transposed convolution, three dilated residual units) and SnakeBeta → convolution. The output is
clamped to [-1, 1] like the reference.

Chunks (`Code2Wav.chunk`): the ``.walk`` file's ``left_context(chunk = 25, left = 25)`` stream
hands the vocoder up to 25 frames of context and 25 new ones; the audio of the new frames is
the chunk's waveform after ``context · total_upsample`` samples, as HF's ``chunked_decode``.
Pass only the valid frames (the stream's padding would change the last frame's samples: the
transposed convolutions reach one frame ahead). Each decoded stretch is `Code2Wav.samples`
long, a little less than ``frames · total_upsample``: every decoder block's transposed
convolution trims ``rate`` samples at its end (555 samples, 23 ms, for the released model; 6
for the tiny one), so the audio of a chunked decode is that much shorter per chunk — as HF's
``chunked_decode`` and ``generate`` (which says so) produce it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.convert import load_converted
from wgc_models.layers.mlp import MLP
from wgc_models.layers.norm import RMSNorm
from wgc_models.layers.rope import RopeTable, apply_rope, inv_freq
from wgc_models.qwen3_omni.omni_config import Code2WavConfig


class CausalConv(nn.Module):
    """``conv`` with all its padding on the left (HF's ``Qwen3OmniMoeCausalConvNet``)."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation, groups=groups)
        self.pad = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (self.pad, 0)))


class CausalTransConv(nn.Module):
    """A transposed convolution trimmed by ``kernel − stride`` on both ends."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[..., self.trim : y.shape[-1] - self.trim]


class SnakeBeta(nn.Module):
    """``x + sin²(x·e^α) / (e^β + 1e-9)``, α and β per channel (log scale)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha.exp()[None, :, None]
        b = self.beta.exp()[None, :, None]
        return x + (1.0 / (b + 1e-9)) * torch.sin(x * a).pow(2)


class ConvNeXt(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.dwconv(x).transpose(1, 2))
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(h)))
        return x + h.transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, cout: int, rate: int):
        super().__init__()
        layers: list[nn.Module] = [SnakeBeta(cin), CausalTransConv(cin, cout, 2 * rate, rate)]
        layers += [ResidualUnit(cout, d) for d in (1, 3, 9)]
        self.block = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.block:
            x = m(x)
        return x


class _Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=cfg.o_bias)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = apply_rope(self.q_proj(x).view(b * t, self.heads, self.head_dim), *rope)
        k = apply_rope(self.k_proj(x).view(b * t, self.kv_heads, self.head_dim), *rope)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, -1).transpose(1, 2)
        if self.heads != self.kv_heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class _LayerScale(nn.Module):
    def __init__(self, dim: int, init: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))


class _Layer(nn.Module):
    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        tc = cfg.transformer
        self.input_layernorm = RMSNorm(tc.hidden_size, tc.rms_norm_eps)
        self.self_attn = _Attention(tc)
        self.post_attention_layernorm = RMSNorm(tc.hidden_size, tc.rms_norm_eps)
        self.mlp = MLP(tc)
        self.self_attn_layer_scale = _LayerScale(tc.hidden_size, cfg.layer_scale)
        self.mlp_layer_scale = _LayerScale(tc.hidden_size, cfg.layer_scale)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        a = self.self_attn(self.input_layernorm(x), rope, mask)
        x = x + self.self_attn_layer_scale.scale * a
        return x + self.mlp_layer_scale.scale * self.mlp(self.post_attention_layernorm(x))


class _Transformer(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        self.window = cfg.sliding_window
        tc = cfg.transformer
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(tc.num_layers))
        self.norm = RMSNorm(tc.hidden_size, tc.rms_norm_eps)
        self.register_buffer("inv_freq", inv_freq(tc), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        pos = torch.arange(t, device=x.device)
        rope = RopeTable(self.inv_freq, t, x.dtype).lookup(pos.repeat(b))
        rel = pos[:, None] - pos[None, :]  # query − key
        mask = (rel >= 0) & (rel < self.window)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.norm(x)


class Code2Wav(nn.Module):
    code_offset: torch.Tensor

    def __init__(self, cfg: Code2WavConfig):
        super().__init__()
        self.config = cfg
        h = cfg.transformer.hidden_size
        self.total_upsample = cfg.total_upsample
        self.pre_transformer = _Transformer(cfg)
        self.code_embedding = nn.Embedding(cfg.codebook_size * cfg.num_quantizers, h)
        offset = torch.arange(cfg.num_quantizers).view(1, -1, 1) * cfg.codebook_size
        self.register_buffer("code_offset", offset, persistent=False)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalTransConv(h, h, r, r), ConvNeXt(h)]) for r in cfg.upsampling_ratios
        )
        dec: list[nn.Module] = [CausalConv(h, cfg.decoder_dim, 7)]
        for i, rate in enumerate(cfg.upsample_rates):
            dec.append(DecoderBlock(cfg.decoder_dim // 2**i, cfg.decoder_dim // 2 ** (i + 1), rate))
        out = cfg.decoder_dim // 2 ** len(cfg.upsample_rates)
        dec += [SnakeBeta(out), CausalConv(out, 1, 7)]
        self.decoder = nn.ModuleList(dec)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32) -> Code2Wav:
        """From a Qwen3-Omni checkpoint folder: the ``code2wav.`` weights."""
        raw = json.loads((Path(path) / "config.json").read_text())
        model = cls(Code2WavConfig.from_dict(raw.get("code2wav_config", raw)))
        load_converted(model, path, prefix="code2wav.")
        return model.to(dtype=dtype).eval()

    @torch.inference_mode()
    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes`` ``[B, quantizers, T]`` → waveform ``[B, 1, T · total_upsample]``."""
        if codes.shape[1] != self.config.num_quantizers:
            raise ValueError(
                f"expected {self.config.num_quantizers} codes per frame, got {codes.shape[1]}"
            )
        x = self.code_embedding(codes + self.code_offset).mean(1)
        x = self.pre_transformer(x).transpose(1, 2)
        for up, convnext in cast(Iterable[tuple[nn.Module, nn.Module]], self.upsample):
            x = convnext(up(x))
        for block in self.decoder:
            x = block(x)
        return x.clamp(min=-1, max=1)

    def samples(self, frames: int) -> int:
        """How many samples ``frames`` frames decode to (see the module docstring)."""
        n = frames
        for r in self.config.upsampling_ratios:
            n *= r
        for r in self.config.upsample_rates:
            n = (n - 1) * r
        return n

    def chunk(self, codes: torch.Tensor, context: int) -> torch.Tensor:
        """The audio of ``codes``' frames after the first ``context`` (``codes`` ``[T,
        quantizers]`` as the stream delivers them, valid frames only): ``[(T − context) ·
        total_upsample]`` fp32."""
        wav = self(codes.T[None].long())[0, 0]
        return wav[context * self.total_upsample :].float()

    def chunked_decode(self, codes: torch.Tensor, chunk: int = 25, left: int = 25) -> torch.Tensor:
        """All of ``codes`` ``[T, quantizers]`` a chunk at a time (HF's ``chunked_decode``)."""
        out: list[torch.Tensor] = []
        start = 0
        while start < codes.shape[0]:
            end = min(start + chunk, codes.shape[0])
            ctx = min(left, start)
            out.append(self.chunk(codes[start - ctx : end], ctx))
            start = end
        return torch.cat(out) if out else torch.zeros(0)
