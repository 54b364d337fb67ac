"""Wan's text encoder: the umT5 encoder (transformers' ``UMT5EncoderModel``), named as a
diffusers ``text_encoder/`` folder (``shared.weight``, ``encoder.block.{i}.layer.{0,1}.*``).

* `UMT5Config`: the ``config.json`` sizes; `UMT5_XXL` is the size Wan2.2 ships (24 layers,
  d_model 4096, 64 heads, gated-GELU feed-forward of 10240).
* `UMT5Encoder`: token embedding, then per layer a pre-RMSNorm self-attention whose scores
  are unscaled ``q·k`` plus that layer's own bucketed relative-position bias (bidirectional
  buckets: half for each direction, exact below ``buckets / 4``, logarithmic up to
  ``max_distance``), and a pre-RMSNorm gated-GELU (tanh) feed-forward; a final RMSNorm.
* `prompt_states(ids, mask)`: what Wan's pipeline hands the transformer: the encoder's states
  for the prompt's tokens and zeros at the padding.

Its checkpoint loads in `wgc_models.wan22.checkpoint`. `PromptTokenizer` makes the ids as Wan's
pipeline does with the folder's ``tokenizer/tokenizer.json``: the prompt cleaned (`clean_prompt`:
ftfy's repairs when that package is installed, as the pipeline makes them, then HTML entities
unescaped twice, whitespace runs to one space, stripped), the special tokens added, truncated
to the text length.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn


class TextConfigError(ValueError):
    """A ``config.json`` this encoder does not run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UMT5Config:
    vocab_size: int = 256384
    d_model: int = 4096
    d_kv: int = 64
    d_ff: int = 10240
    num_layers: int = 24
    num_heads: int = 64
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> UMT5Config:
        if raw.get("feed_forward_proj", "gated-gelu") != "gated-gelu":
            raise TextConfigError(
                f"feed_forward_proj {raw['feed_forward_proj']!r}: only gated-gelu"
            )
        if raw.get("model_type", "umt5") != "umt5":
            raise TextConfigError(f"model_type {raw['model_type']!r} is not umt5")
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in names})

    @classmethod
    def from_folder(cls, path: str | Path) -> UMT5Config:
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))


UMT5_XXL = UMT5Config()


class RMSNormT5(nn.Module):
    """``weight · x / rms(x)``, the mean of squares in fp32 (T5's layer norm)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def relative_buckets(cfg: UMT5Config, length: int) -> torch.Tensor:
    """``[length, length]`` bucket of each (query, key) pair's offset ``key - query``."""
    pos = torch.arange(length)
    rel = pos[None, :] - pos[:, None]
    half = cfg.relative_attention_num_buckets // 2
    out = (rel > 0).long() * half
    rel = rel.abs()
    exact = half // 2
    far = math.log(cfg.relative_attention_max_distance / exact)
    scaled = torch.log(rel.float() / exact) / far * (half - exact)
    large = torch.clamp(exact + scaled.long(), max=half - 1)
    return out + torch.where(rel < exact, rel, large)


class _SelfAttention(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        inner = cfg.num_heads * cfg.d_kv
        self.heads = cfg.num_heads
        self.q = nn.Linear(cfg.d_model, inner, bias=False)
        self.k = nn.Linear(cfg.d_model, inner, bias=False)
        self.v = nn.Linear(cfg.d_model, inner, bias=False)
        self.o = nn.Linear(inner, cfg.d_model, bias=False)
        self.relative_attention_bias = nn.Embedding(cfg.relative_attention_num_buckets, self.heads)

    def forward(self, x: torch.Tensor, buckets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (
            p(x).view(b, n, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        bias = self.relative_attention_bias(buckets).permute(2, 0, 1)[None]
        scores = q @ k.transpose(2, 3) + bias + mask
        out = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.o(out.transpose(1, 2).reshape(b, n, -1))


class _AttnLayer(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        self.SelfAttention = _SelfAttention(cfg)
        self.layer_norm = RMSNormT5(cfg.d_model, cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor, buckets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x + self.SelfAttention(self.layer_norm(x), buckets, mask)


class _GatedGelu(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        self.wi_0 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.wi_1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.wo = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x)
        return self.wo(h.to(self.wo.weight.dtype))


class _FFLayer(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        self.DenseReluDense = _GatedGelu(cfg)
        self.layer_norm = RMSNormT5(cfg.d_model, cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.DenseReluDense(self.layer_norm(x))


class _Block(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        self.layer = nn.ModuleList([_AttnLayer(cfg), _FFLayer(cfg)])

    def forward(self, x: torch.Tensor, buckets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.layer[1](self.layer[0](x, buckets, mask))


class _Stack(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        self.block = nn.ModuleList([_Block(cfg) for _ in range(cfg.num_layers)])
        self.final_layer_norm = RMSNormT5(cfg.d_model, cfg.layer_norm_epsilon)


class UMT5Encoder(nn.Module):
    def __init__(self, cfg: UMT5Config):
        super().__init__()
        self.cfg = cfg
        self.shared = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.encoder = _Stack(cfg)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``ids [B, L]``, ``mask [B, L]`` (1 = token, 0 = padding) → ``[B, L, d_model]``."""
        x = self.shared(ids)
        buckets = relative_buckets(self.cfg, ids.shape[1]).to(ids.device)
        if mask is None:
            mask = torch.ones_like(ids)
        add = torch.zeros(mask.shape, dtype=x.dtype, device=x.device)
        add = add.masked_fill(mask == 0, torch.finfo(x.dtype).min)[:, None, None, :]
        for block in self.encoder.block:
            x = block(x, buckets, add)
        return self.encoder.final_layer_norm(x)

    def prompt_states(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The states of the prompt's tokens, zeros at the padding (Wan's pipeline)."""
        states = self(ids, mask)
        return states * (mask > 0)[..., None].to(states.dtype)


def _ftfy_fix() -> Callable[[str], str] | None:
    """ftfy's ``fix_text`` when the package is installed (the ``wan`` extra), else None."""
    try:
        import ftfy
    except ImportError:
        return None
    return ftfy.fix_text


def clean_prompt(text: str, fix: Callable[[str], str] | None = None) -> str:
    """Wan's ``prompt_clean``: ``fix`` (ftfy's ``fix_text``, which the pipeline applies when
    ftfy is installed: `_ftfy_fix`; None: no repairs), HTML entities unescaped twice, whitespace
    runs to one space, the ends stripped."""
    if fix is not None:
        text = fix(text)
    return re.sub(r"\s+", " ", html.unescape(html.unescape(text)).strip()).strip()


class PromptTokenizer:
    """A checkpoint's ``tokenizer.json``: a prompt → at most ``length`` ids, the tokenizer's
    special tokens (umT5's ``</s>``) included, as ``tokenizer(..., truncation=True,
    max_length=length)`` gives them."""

    def __init__(self, path: str | Path, length: int):
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(length)  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
        self.fix = _ftfy_fix()

    def __call__(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(clean_prompt(prompt, self.fix)).ids
