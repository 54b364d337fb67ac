"""Whisper (``transformers.WhisperForConditionalGeneration``): the encoder, and the decoder over
the runtime's paged KV pool, named parameter for parameter as a Hugging Face checkpoint.

* `WhisperConfig`: the sizes of ``config.json`` (``d_model``, ``encoder_layers``, ...).
* `window_features`: one window of 16 kHz audio → ``[num_mel_bins, 2 · max_source_positions]``
  log-mel features exactly as ``WhisperFeatureExtractor`` computes them (the clip padded with
  zeros to the window, a centred STFT over the whole window, the maximum taken over it).
* `WhisperEncoder` (``model.encoder.*``): two GELU convolutions (the second of stride 2), the
  sinusoidal position table the checkpoint carries, pre-LayerNorm transformer layers and a final
  LayerNorm.
* `WhisperTextDecoder` (``model.decoder.*`` and ``proj_out``, tied to the token embedding):
  learned positions, per layer pre-LayerNorm causal self-attention, cross-attention over the
  encoder's states and a GELU MLP. Its K/V live in the pool under two labels per request:
  ``main`` (the decoder's own tokens, appended as they come) and ``cross`` (each layer's
  ``k_proj``/``v_proj`` of the encoder's states, appended once per window: `cross_kv`).
  `WhisperTextDecoder.step` runs the tokens of several requests as one ragged batch: the
  self-attention through the backend's causal step over ``main``; the cross-attention through
  a second backend in which every query token is its own one-token sequence over its request's
  ``cross`` pages, so it sees all of them (no causal mask).

Its checkpoint (names, strict loading by halves) is `wgc_models.whisper.checkpoint`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.whisper_mel import HOP, N_FFT, mel_filters
from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata, prepare_step
from wgc_runtime.engines.attention.select import make_backend
from wgc_runtime.engines.kv_pool import PagedKVPool

MAIN, CROSS = "main", "cross"  # the decoder's KV labels


class WhisperConfigError(ValueError):
    """``config.json`` is not a Whisper config this implementation runs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WhisperConfig:
    vocab_size: int
    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    max_source_positions: int
    max_target_positions: int
    tie_word_embeddings: bool = True

    @property
    def n_frames(self) -> int:
        """Feature frames of one window (the convolution stem halves them)."""
        return 2 * self.max_source_positions

    @property
    def head_dim(self) -> int:
        return self.d_model // self.decoder_attention_heads

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WhisperConfig:
        if raw.get("model_type", "whisper") != "whisper":
            raise WhisperConfigError(f"model_type `{raw.get('model_type')}` is not `whisper`")
        act = raw.get("activation_function", "gelu")
        if act != "gelu":
            raise WhisperConfigError(f"activation_function `{act}` is not supported (`gelu`)")
        fields = [f for f in cls.__dataclass_fields__ if f != "tie_word_embeddings"]
        missing = [f for f in fields if f not in raw]
        if missing:
            raise WhisperConfigError(f"config.json has no {', '.join(f'`{m}`' for m in missing)}")
        cfg = cls(
            **{f: int(raw[f]) for f in fields},
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
        )
        for heads in (cfg.encoder_attention_heads, cfg.decoder_attention_heads):
            if cfg.d_model % heads:
                raise WhisperConfigError(f"d_model {cfg.d_model} does not split into {heads} heads")
        return cfg

    @classmethod
    def from_pretrained(cls, path: str | Path) -> WhisperConfig:
        file = Path(path) / "config.json"
        if not file.is_file():
            raise WhisperConfigError(f"no config.json at `{file}`")
        return cls.from_dict(json.loads(file.read_text()))


def window_features(audio: torch.Tensor, bins: int, frames: int) -> torch.Tensor:
    """``audio`` (16 kHz, at most ``frames · 160`` samples) → ``[bins, frames]`` (module doc)."""
    x = audio.reshape(-1).float()
    samples = frames * HOP
    if x.numel() > samples:
        raise ValueError(f"{x.numel()} samples do not fit one window of {samples}")
    x = F.pad(x, (0, samples - x.numel()))
    window = torch.hann_window(N_FFT, device=x.device)
    stft = torch.stft(x, N_FFT, HOP, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log = torch.clamp(mel_filters(bins).to(x.device).T @ power, min=1e-10).log10()
    log = torch.maximum(log, log.max() - 8.0)
    return (log + 4.0) / 4.0


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """The encoder's position table: ``channels / 2`` sines then cosines of geometric
    timescales from 1 to 10000 (what the published checkpoints carry)."""
    step = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat((t.sin(), t.cos()), dim=1)


class WhisperAttention(nn.Module):
    """q/k/v/out projections as transformers names them (``k_proj`` has no bias)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d)
        self.q_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], self.heads, self.head_dim)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: WhisperConfig):
        super().__init__()
        d = cfg.d_model
        self.self_attn = WhisperAttention(d, cfg.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, cfg.encoder_ffn_dim)
        self.fc2 = nn.Linear(cfg.encoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.self_attn
        h = self.self_attn_layer_norm(x)
        # [1, heads, frames, dim]: 4-d inputs take SDPA's fused CPU kernel (3-d: 9x slower)
        q, k, v = (a.split(p(h)).transpose(0, 1)[None] for p in (a.q_proj, a.k_proj, a.v_proj))
        o = F.scaled_dot_product_attention(q, k, v)[0]
        x = x + a.out_proj(o.transpose(0, 1).reshape(x.shape))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(nn.Module):
    """``model.encoder``: features ``[mels, frames]`` → states ``[frames / 2, d_model]``."""

    def __init__(self, cfg: WhisperConfig):
        super().__init__()
        self.config = cfg
        d = cfg.d_model
        self.conv1 = nn.Conv1d(cfg.num_mel_bins, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(cfg.max_source_positions, d)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        want = (self.config.num_mel_bins, self.config.n_frames)
        if tuple(features.shape) != want:
            raise ValueError(f"the encoder takes features {list(want)}, got {list(features.shape)}")
        w = self.conv1.weight
        x = F.gelu(self.conv1(features.to(w.dtype)[None]))
        x = F.gelu(self.conv2(x))[0].T  # [frames / 2, d]
        x = x + self.embed_positions.weight
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: WhisperConfig):
        super().__init__()
        d, heads = cfg.d_model, cfg.decoder_attention_heads
        self.self_attn = WhisperAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = WhisperAttention(d, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, cfg.decoder_ffn_dim)
        self.fc2 = nn.Linear(cfg.decoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)


class _Decoder(nn.Module):
    def __init__(self, cfg: WhisperConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.embed_positions = nn.Embedding(cfg.max_target_positions, cfg.d_model)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.layer_norm = nn.LayerNorm(cfg.d_model)

    def blocks(self) -> list[DecoderLayer]:
        """The layers, typed (a `ModuleList` yields plain modules)."""
        return [cast(DecoderLayer, m) for m in self.layers]


class _Model(nn.Module):
    """Holds ``decoder`` under the checkpoint's ``model.`` prefix."""

    def __init__(self, cfg: WhisperConfig):
        super().__init__()
        self.decoder = _Decoder(cfg)


@dataclass(slots=True)
class Batch:
    """One ragged step's attention: self over ``main``, cross over ``cross``."""

    pool: PagedKVPool
    self_backend: AttentionBackend
    self_meta: AttentionMetadata
    cross_backend: AttentionBackend
    cross_meta: AttentionMetadata


class WhisperTextDecoder(nn.Module):
    """``model.decoder`` and ``proj_out`` over the paged pool (see the module docstring)."""

    def __init__(self, cfg: WhisperConfig):
        super().__init__()
        self.config = cfg
        self.model = _Model(cfg)
        self.proj_out = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.proj_out.weight = self.model.decoder.embed_tokens.weight

    @torch.no_grad()
    def cross_kv(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each layer's cross-attention keys and values of the encoder's ``states``:
        ``[layers, frames, heads, head_dim]`` each (for ``ctx.kv.append(k, v, label=CROSS)``)."""
        x = states.to(self.proj_out.weight.dtype)
        ks: list[torch.Tensor] = []
        vs: list[torch.Tensor] = []
        for layer in self.model.decoder.blocks():
            a = layer.encoder_attn
            ks.append(a.split(a.k_proj(x)))
            vs.append(a.split(a.v_proj(x)))
        return torch.stack(ks), torch.stack(vs)

    def batch(
        self, pool: PagedKVPool, backends: tuple[AttentionBackend, AttentionBackend],
        seqs: Sequence[tuple[Hashable, int]],
    ) -> Batch:  # fmt: skip
        """Appends each (request, new tokens) to its ``main`` sequence; the step's metadata."""
        self_meta = prepare_step(pool, [(r, MAIN, n) for r, n in seqs])
        tables: list[list[int]] = []
        lens: list[int] = []
        for r, n in seqs:
            table, length = pool.page_table(r, CROSS), pool.seq_len(r, CROSS)
            if length == 0:
                raise ValueError(f"request `{r}` decodes before its audio's cross keys/values")
            tables += [table] * n
            lens += [length] * n
        cross_meta = AttentionMetadata.from_tables(
            tables, lens, [1] * len(lens), pool.page_size, device=pool.device
        )
        return Batch(pool, backends[0], self_meta, backends[1], cross_meta)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, b: Batch) -> torch.Tensor:
        """Hidden states of the batch's new ``tokens`` (1-D, ragged by request) after the final
        LayerNorm; `logits` maps them to the vocabulary."""
        dec = self.model.decoder
        positions = b.self_meta.positions
        if int(positions.max()) >= self.config.max_target_positions:
            raise ValueError(f"past the decoder's {self.config.max_target_positions} positions")
        x = dec.embed_tokens(tokens) + dec.embed_positions(positions)
        slots = b.self_meta.slot_mapping
        assert slots is not None  # prepare_step maps every new token
        b.self_backend.plan(b.self_meta)
        b.cross_backend.plan(b.cross_meta)
        for i, layer in enumerate(dec.blocks()):
            kv_layer = b.pool.layer(i)
            a = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q, k, v = a.split(a.q_proj(h)), a.split(a.k_proj(h)), a.split(a.v_proj(h))
            b.self_backend.write_kv(kv_layer, k, v, slots)
            o = b.self_backend.forward(q, kv_layer, b.self_meta).to(x.dtype)
            x = x + a.out_proj(o.reshape(x.shape))
            c = layer.encoder_attn
            q = c.split(c.q_proj(layer.encoder_attn_layer_norm(x)))
            o = b.cross_backend.forward(q, kv_layer, b.cross_meta).to(x.dtype)
            x = x + c.out_proj(o.reshape(x.shape))
            x = x + layer.fc2(F.gelu(layer.fc1(layer.final_layer_norm(x))))
        return dec.layer_norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj_out(hidden).float()


def backends(main: AttentionBackend) -> tuple[AttentionBackend, AttentionBackend]:
    """``main`` (the pool's backend, for self-attention) and a second of its kind for the
    cross-attention, so neither re-plans between a layer's two attentions."""
    cross = make_backend(
        main.name,
        num_heads=main.num_heads,
        num_kv_heads=main.num_kv_heads,
        head_dim=main.head_dim,
        page_size=main.page_size,
        device=main.device,
        dtype=main.dtype,
    )
    return main, cross
