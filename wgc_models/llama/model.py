"""Llama's architecture: a Llama/Qwen2-style decoder over the paged KV pool, built from the shared
layers; Orpheus's LM and the speculative draft are this decoder too.

The module tree mirrors Hugging Face's ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` name for name
(``model.embed_tokens``, ``model.layers.{i}.self_attn.q_proj``, ..., ``model.norm``,
``lm_head``), so `wgc_models.llama.checkpoint` fills it from a checkpoint by parameter name.
`lm_config` sizes it from a node's ``.walk`` config, `lm_parts` says what it will hold.

Pieces: `RMSNorm` (`norm`), rotary embeddings (`rope`: ``rope_theta`` and
scaling from the config), grouped-query `Attention` through an `AttentionBackend` over a
`PagedKVPool` (`attention`), a SwiGLU `MLP` (`mlp`), a tied or untied ``lm_head``, and Qwen2's
q/k/v biases.

Per-token cost. A decode step of a small model is dominated by the number of tensor operations,
not their FLOPs, so the forward keeps that number low: q/k/v and gate/up each run as ONE matrix
product (`FusedLinears`), rotary cos/sin come from a table by position (`RopeTable`) and rotate
q and k together, RMSNorm is ``F.rms_norm``, and the residual adds ride on ``addmm``
(`linear_add`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from wgc_models._shared.weights import part
from wgc_models.layers.attention import Attention, AttnStep
from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.linear import linear_add
from wgc_models.layers.mlp import MLP
from wgc_models.layers.norm import RMSNorm
from wgc_models.layers.rope import RopeTable, inv_freq
from wgc_runtime.contract.weights import WeightParts

Rope = tuple[torch.Tensor, torch.Tensor]  # cos, signed sin of each token (`RopeTable.lookup`)


class DecoderLayer(nn.Module):
    """Pre-norm attention then pre-norm MLP, each with a residual add."""

    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, index)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, rope: Rope, step: AttnStep) -> torch.Tensor:
        attn = self.self_attn.attend(self.input_layernorm(x), rope, step)
        x = linear_add(x, attn, self.self_attn.o_proj)
        mlp = self.mlp.hidden(self.post_attention_layernorm(x))
        return linear_add(x, mlp, self.mlp.down_proj)


class _Body(nn.Module):
    """Named like HF's ``model`` submodule."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaDecoder(nn.Module):
    """The decoder (Llama, or Qwen2 with q/k/v biases). ``forward`` maps ragged tokens and
    positions to final hidden states; `logits` applies ``lm_head``."""

    inv_freq: torch.Tensor  # a non-persistent buffer (not in checkpoints)

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.config = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", inv_freq(cfg), persistent=False)
        self._rope: RopeTable | None = None

    def rope_table(self, size: int, dtype: torch.dtype) -> RopeTable:
        """A `RopeTable` covering at least ``size`` positions (grown by doubling, kept)."""
        t = self._rope
        inv = self.inv_freq
        if t is None or t.size < size or t.dtype != dtype or t.device != inv.device:
            grow = max(size, 2 * t.size if t is not None else 0, 256)
            t = self._rope = RopeTable(inv, grow, dtype)
        return t

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, step: AttnStep
    ) -> torch.Tensor:
        x = self.model.embed_tokens(tokens)
        rope = self.rope_table(step.max_positions(), x.dtype).lookup(positions)
        for layer in self.model.layers:
            x = layer(x, rope, step)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


def lm_config(config: Mapping[str, Any], *, tied: bool) -> DecoderConfig:
    return DecoderConfig(
        vocab_size=int(config["vocab"]),
        hidden_size=int(config["hidden"]),
        intermediate_size=int(config["intermediate"]),
        num_layers=int(config["layers"]),
        num_heads=int(config["heads"]),
        num_kv_heads=int(config["kv_heads"]),
        head_dim=int(config["head_dim"]),
        tie_word_embeddings=tied,
    )


def lm_parts(family: str, config: Mapping[str, Any], *, tied: bool) -> list[WeightParts]:
    """A Llama decoder's weights (Orpheus's LM ties its embeddings; the Llama example's not)."""
    cfg = lm_config(config, tied=tied)
    return [part(family, "lm", config, lambda: LlamaDecoder(cfg))]
