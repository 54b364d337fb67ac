"""BAGEL's backbone: Qwen2 as a mixture of transformers (MoT) over block attention.

Every layer holds two sets of weights — the understanding ones (Qwen2's own: ``self_attn.{q,k,
v,o}_proj``, ``q_norm`` / ``k_norm``, ``mlp``, ``input_layernorm``, ``post_attention_layernorm``)
and the generation expert's (the same names with ``_moe_gen``) — and routes each token by its
kind: text and ViT tokens through the first, VAE latent tokens through the second; attention
is shared (one sequence, one KV cache). The final norm is ``norm`` / ``norm_moe_gen`` by kind
too. Named like BAGEL's ``Qwen2ForCausalLM`` (``model.embed_tokens``, ``model.layers.{i}.…``,
``model.norm``, ``model.norm_moe_gen``, ``lm_head``), the ``language_model.`` subtree of its
checkpoint. With only understanding tokens (and ``qk_norm`` off) it is exactly transformers'
``Qwen2ForCausalLM``.

Precision: BAGEL runs in bf16 throughout; this module computes in its parameters' dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.block_attention import BlockStep
from wgc_models.layers.invariant import Linear
from wgc_models.layers.norm import RMSNorm
from wgc_models.layers.rope import RopeTable, apply_rope


@dataclass(frozen=True, slots=True, kw_only=True)
class MoTConfig:
    """BAGEL's ``llm_config`` (a Qwen2 config with ``qk_norm`` and ``layer_module``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    qk_norm: bool = True
    tie_word_embeddings: bool = False

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MoTConfig:
        rope: dict[str, Any] = raw.get("rope_parameters") or {}
        return cls(
            vocab_size=int(raw["vocab_size"]),
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=int(raw["num_attention_heads"]),
            num_key_value_heads=int(raw.get("num_key_value_heads", raw["num_attention_heads"])),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 1_000_000.0))),
            qk_norm=bool(raw.get("qk_norm", True)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def route(
    x: torch.Tensor,
    gen: torch.Tensor | None,
    und_fn: Callable[[torch.Tensor], torch.Tensor],
    gen_fn: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``und_fn`` on the understanding rows of ``x``, ``gen_fn`` on the generation rows
    (``gen``: a bool mask, None when every row is an understanding row)."""
    if gen is None:
        return und_fn(x)
    out_gen = gen_fn(x[gen])
    out = out_gen.new_empty((x.shape[0], *out_gen.shape[1:]))
    out[gen] = out_gen
    und = ~gen
    if bool(und.any()):
        out[und] = und_fn(x[und])
    return out


class SwiGLU(nn.Module):
    """Qwen2's MLP."""

    def __init__(self, cfg: MoTConfig):
        super().__init__()
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(h, i, bias=False)
        self.up_proj = Linear(h, i, bias=False)
        self.down_proj = Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class PackedAttentionMoT(nn.Module):
    o_proj: nn.Linear
    o_proj_moe_gen: nn.Linear

    def __init__(self, cfg: MoTConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            d,
        )
        self.qk_norm = cfg.qk_norm
        for suffix in ("", "_moe_gen"):
            setattr(self, f"q_proj{suffix}", Linear(h, self.heads * d, bias=True))
            setattr(self, f"k_proj{suffix}", Linear(h, self.kv_heads * d, bias=True))
            setattr(self, f"v_proj{suffix}", Linear(h, self.kv_heads * d, bias=True))
            setattr(self, f"o_proj{suffix}", Linear(self.heads * d, h, bias=False))
            if cfg.qk_norm:
                setattr(self, f"q_norm{suffix}", RMSNorm(d, cfg.rms_norm_eps))
                setattr(self, f"k_norm{suffix}", RMSNorm(d, cfg.rms_norm_eps))

    def _qkv(self, x: torch.Tensor, suffix: str) -> torch.Tensor:
        t, d = x.shape[0], self.head_dim
        q = getattr(self, f"q_proj{suffix}")(x).view(t, self.heads, d)
        k = getattr(self, f"k_proj{suffix}")(x).view(t, self.kv_heads, d)
        v = getattr(self, f"v_proj{suffix}")(x).view(t, self.kv_heads, d)
        if self.qk_norm:
            q, k = getattr(self, f"q_norm{suffix}")(q), getattr(self, f"k_norm{suffix}")(k)
        return torch.cat((q, k, v), dim=1)

    def forward(
        self,
        x: torch.Tensor,
        gen: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor],
        step: BlockStep,
        layer: int,
    ) -> torch.Tensor:
        h, hk = self.heads, self.kv_heads
        qkv = route(x, gen, lambda a: self._qkv(a, ""), lambda a: self._qkv(a, "_moe_gen"))
        qk = apply_rope(qkv[:, : h + hk], *rope)
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + hk :]
        out = step.attend(layer, q, k, v, self.head_dim**-0.5).reshape(x.shape[0], -1)
        return route(out, gen, self.o_proj, self.o_proj_moe_gen)


class Qwen2MoTDecoderLayer(nn.Module):
    def __init__(self, cfg: MoTConfig):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = PackedAttentionMoT(cfg)
        self.mlp, self.mlp_moe_gen = SwiGLU(cfg), SwiGLU(cfg)
        self.input_layernorm, self.input_layernorm_moe_gen = RMSNorm(h, eps), RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm_moe_gen = RMSNorm(h, eps)

    def forward(
        self,
        x: torch.Tensor,
        gen: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor],
        step: BlockStep,
        layer: int,
    ) -> torch.Tensor:
        h = route(x, gen, self.input_layernorm, self.input_layernorm_moe_gen)
        x = x + self.self_attn(h, gen, rope, step, layer)
        h = route(
            x,
            gen,
            lambda a: self.mlp(self.post_attention_layernorm(a)),
            lambda a: self.mlp_moe_gen(self.post_attention_layernorm_moe_gen(a)),
        )
        return x + h


class _Model(nn.Module):
    def __init__(self, cfg: MoTConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen2MoTDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm_moe_gen = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen2MoT(nn.Module):
    """Embeddings in, final hidden states out (module docstring); `logits` for text."""

    inv_freq: torch.Tensor  # a non-persistent buffer (not in checkpoints)

    def __init__(self, cfg: MoTConfig):
        super().__init__()
        self.config = cfg
        self.model = _Model(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        d = cfg.head_dim
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        self.register_buffer("inv_freq", inv, persistent=False)
        self._rope: RopeTable | None = None

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(ids.long())

    def _rope_for(self, positions: torch.Tensor, dtype: torch.dtype):
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
        gen: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x`` ``[tokens, hidden]`` embeddings at rotary ``positions`` (the step's blocks'
        tokens in order); ``gen``: which rows are generation (VAE latent) tokens."""
        if gen is not None and not bool(gen.any()):
            gen = None
        rope = self._rope_for(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, gen, rope, step, i)
        return route(x, gen, self.model.norm, self.model.norm_moe_gen)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()
