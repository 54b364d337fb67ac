"""Gemma layers over block attention: PaliGemma's language model and π0's action expert.

Named like transformers' ``GemmaModel`` (``embed_tokens``, ``layers.{i}.input_layernorm``,
``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm``, ``mlp.{gate,up,down}_proj``,
``norm``). Gemma's RMSNorm scales by ``1 + weight`` in fp32; its MLP is GeGLU with the tanh
GELU; token embeddings are scaled by ``√hidden`` (`GemmaStack.embed`). Attention runs through a
`wgc_models.layers.block_attention.BlockStep`, so one stack prefills a prefix into the KV
pool and another (π0's expert) attends to that prefix.

**Adaptive RMSNorm** (π0.5's action expert, openpi's ``use_adarms``): an adaptive norm has no
weight but ``dense`` (``Linear(cond, 3 · dim)``); from the conditioning vector (π0.5: the
flow-matching time) it makes ``scale, shift, gate``: ``norm(x) · (1 + scale) + shift``, and the
residual it feeds adds ``gate · out`` instead of ``out``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.block_attention import BlockStep
from wgc_models.layers.invariant import Linear
from wgc_models.layers.rope import RopeTable, apply_rope


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmaConfig:
    """``GemmaConfig``'s fields a stack needs."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int = 0  # 0: no embedding table (the action expert)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, embed: bool = True) -> GemmaConfig:
        rope: dict[str, Any] = raw.get("rope_parameters") or {}
        return cls(
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=int(raw["num_attention_heads"]),
            num_key_value_heads=int(raw.get("num_key_value_heads", raw["num_attention_heads"])),
            head_dim=int(raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]),
            vocab_size=int(raw.get("vocab_size", 0)) if embed else 0,
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        )


class GemmaRMSNorm(nn.Module):
    """``norm(x) · (1 + weight)`` in fp32; with ``cond``: adaptive (module docstring)."""

    def __init__(self, dim: int, eps: float, cond: int | None = None):
        super().__init__()
        self.eps = eps
        if cond is None:
            self.weight = nn.Parameter(torch.zeros(dim))
            self.dense: nn.Linear | None = None
        else:
            self.dense = Linear(cond, 3 * dim)

    def forward(
        self, x: torch.Tensor, cond: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The normed ``x`` and the residual gate (None for a plain norm)."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.dense is None:
            return (h * (1.0 + self.weight.float())).to(x.dtype), None
        if cond is None:
            raise ValueError("an adaptive RMSNorm needs its conditioning vector")
        scale, shift, gate = self.dense(cond).chunk(3, dim=-1)
        return (h * (1 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


def gated(residual: torch.Tensor, out: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return residual + out if gate is None else residual + out * gate


class GemmaAttention(nn.Module):
    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            d,
        )
        self.q_proj = Linear(h, self.heads * d, bias=False)
        self.k_proj = Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = Linear(self.heads * d, h, bias=False)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], step: BlockStep, layer: int
    ) -> torch.Tensor:
        t = x.shape[0]
        q = apply_rope(self.q_proj(x).view(t, self.heads, self.head_dim), *rope)
        k = apply_rope(self.k_proj(x).view(t, self.kv_heads, self.head_dim), *rope)
        v = self.v_proj(x).view(t, self.kv_heads, self.head_dim)
        out = step.attend(layer, q, k, v, self.head_dim**-0.5)
        return self.o_proj(out.reshape(t, -1))


class GemmaMLP(nn.Module):
    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(h, i, bias=False)
        self.up_proj = Linear(h, i, bias=False)
        self.down_proj = Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class GemmaLayer(nn.Module):
    def __init__(self, cfg: GemmaConfig, cond: int | None = None):
        super().__init__()
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cond)
        self.self_attn = GemmaAttention(cfg)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cond)
        self.mlp = GemmaMLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        step: BlockStep,
        layer: int,
        cond: torch.Tensor | None = None,
    ) -> torch.Tensor:
        h, gate = self.input_layernorm(x, cond)
        x = gated(x, self.self_attn(h, rope, step, layer), gate)
        h, gate = self.post_attention_layernorm(x, cond)
        return gated(x, self.mlp(h), gate)


class GemmaStack(nn.Module):
    """Layers + final norm (+ ``embed_tokens`` when the config has a vocabulary), fed with
    embeddings; ``cond`` (one vector per token) when the norms are adaptive."""

    inv_freq: torch.Tensor  # a non-persistent buffer (not in checkpoints)

    def __init__(self, cfg: GemmaConfig, cond: int | None = None):
        super().__init__()
        self.config = cfg
        if cfg.vocab_size:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(GemmaLayer(cfg, cond) for _ in range(cfg.num_hidden_layers))
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cond)
        d = cfg.head_dim
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        self.register_buffer("inv_freq", inv, persistent=False)
        self._rope: RopeTable | None = None

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings times ``√hidden`` (the scale rounded to the weight's dtype, as HF)."""
        w = self.embed_tokens.weight
        scale = torch.tensor(self.config.hidden_size**0.5, dtype=w.dtype)
        return self.embed_tokens(ids) * scale

    def rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        size = int(positions.max()) + 1 if positions.numel() else 1
        t = self._rope
        if t is None or t.size < size or t.dtype != dtype or t.device != self.inv_freq.device:
            grow = max(size, 2 * t.size if t is not None else 0, 256)
            t = self._rope = RopeTable(self.inv_freq, grow, dtype)
        return t.lookup(positions)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        step: BlockStep,
        cond: torch.Tensor | None = None,
    ) -> torch.Tensor:
        rope = self.rope(positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, step, i, cond)
        return self.norm(x, cond)[0]
