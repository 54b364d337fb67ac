"""The Qwen3-Omni audio encoder (the Thinker's ``audio_tower``): log-mel features → one
embedding per 80 ms, in the Thinker's width.

As HF's ``Qwen3OmniMoeAudioEncoder``, name for name: the mel frames are cut into chunks of
``2 · n_window`` frames (the last may be shorter), each chunk goes through three stride-2
``Conv2d`` + GELU (``conv2d1..3``: 8× fewer frames) and ``conv_out``, plus sinusoidal positions
restarting in every chunk; the valid frames of all chunks are concatenated and run through
``layers`` (pre-norm encoder layers whose attention is bidirectional *within windows* of
``n_window_infer / (2 · n_window)`` chunks, the ``cu_seqlens`` of HF), then ``ln_post``,
``proj1``, GELU, ``proj2``. The mel front end (Whisper's feature extractor) is not part of it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.host_values import int_list


def out_lengths(lengths: torch.Tensor, n_window: int) -> torch.Tensor:
    """Encoder frames for ``lengths`` mel frames (HF's ``_get_feat_extract_output_lengths``)."""
    chunk = n_window * 2
    rest = lengths % chunk
    feat = (rest - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (lengths // chunk) * 13


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    inc = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2).float())
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.q_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, windows: list[int]) -> torch.Tensor:
        t, d = x.shape
        q, k, v = (
            p(x).view(t, self.heads, -1).transpose(0, 1)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        outs = [
            F.scaled_dot_product_attention(qq[None], kk[None], vv[None])[0]
            for qq, kk, vv in zip(
                q.split(windows, 1), k.split(windows, 1), v.split(windows, 1), strict=True
            )
        ]
        return self.out_proj(torch.cat(outs, dim=1).transpose(0, 1).reshape(t, d))


class _Layer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int):
        super().__init__()
        self.self_attn = _Attention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, windows: list[int]) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), windows)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    """``audio_tower``: `forward` maps mel features ``[mel_bins, frames]`` (several audios
    concatenated along frames, ``lengths`` each) to ``[sum(out_lengths), output_dim]``."""

    positions: torch.Tensor

    def __init__(self, raw: dict[str, Any]):
        super().__init__()
        d, mel = int(raw.get("d_model", 1280)), int(raw.get("num_mel_bins", 128))
        hid = int(raw.get("downsample_hidden_size", 480))
        self.n_window = int(raw.get("n_window", 50))
        self.n_window_infer = int(raw.get("n_window_infer", 800))
        heads, ffn = (
            int(raw.get("encoder_attention_heads", 20)),
            int(raw.get("encoder_ffn_dim", 5120)),
        )
        self.register_buffer(
            "positions", _sinusoids(int(raw.get("max_source_positions", 1500)), d), persistent=False
        )
        self.layers = nn.ModuleList(
            _Layer(d, heads, ffn) for _ in range(int(raw.get("encoder_layers", 32)))
        )
        self.ln_post = nn.LayerNorm(d)
        self.conv2d1 = nn.Conv2d(1, hid, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(hid, hid, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(hid, hid, 3, 2, padding=1)
        self.conv_out = nn.Linear(hid * ((((mel + 1) // 2 + 1) // 2 + 1) // 2), d, bias=False)
        self.proj1 = nn.Linear(d, d)
        self.proj2 = nn.Linear(d, int(raw.get("output_dim", 3584)))

    def _chunks(self, lengths: torch.Tensor) -> torch.Tensor:
        size = self.n_window * 2
        out: list[int] = []
        for n in int_list(lengths):
            out += [size] * (n // size) + ([n % size] if n % size else [])
        return torch.tensor(out, dtype=torch.long)

    def _windows(self, lengths: torch.Tensor, chunk_out: torch.Tensor) -> list[int]:
        """Attention windows over the valid frames (HF's ``cu_seqlens`` differences)."""
        window = int(chunk_out.max()) * (self.n_window_infer // (self.n_window * 2))
        out: list[int] = []
        for n in int_list(out_lengths(lengths, self.n_window)):
            out += [window] * (n // window) + ([n % window] if n % window else [])
        return out

    @torch.inference_mode()
    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        chunks = self._chunks(lengths)
        pieces = torch.split(features.T, int_list(chunks), dim=0)
        x = nn.utils.rnn.pad_sequence(list(pieces), batch_first=True).transpose(1, 2)
        x = x[:, None].to(self.conv2d1.weight.dtype)
        x = F.gelu(self.conv2d3(F.gelu(self.conv2d2(F.gelu(self.conv2d1(x))))))
        b, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).reshape(b, t, c * f))
        x = x + self.positions[:t].to(x.dtype)[None]
        chunk_out = out_lengths(chunks, self.n_window)
        valid = torch.arange(t)[None, :] < chunk_out[:, None]
        h = x.reshape(-1, x.shape[-1])[valid.flatten()]
        windows = self._windows(lengths, chunk_out)
        for layer in self.layers:
            h = layer(h, windows)
        return self.proj2(F.gelu(self.proj1(self.ln_post(h))))
