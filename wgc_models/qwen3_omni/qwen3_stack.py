"""Qwen3 decoder stacks (dense or MoE) fed with embeddings: the body of the Qwen3-Omni Thinker,
Talker and code predictor.

A `Qwen3Layer` is pre-norm `QKNormAttention` then a pre-norm MLP — a `SparseMoeBlock` where the
`MoeConfig` says so, else the SwiGLU `MLP` — each with a residual add (HF's
``Qwen3OmniMoeThinkerTextDecoderLayer`` / ``…TalkerDecoderLayer`` /
``…TalkerCodePredictorDecoderLayer``; the Talker's layers are all sparse with a shared expert).
A `Qwen3Stack` is ``layers`` and the final ``norm``; the models that own one add their own
embedding (``embed_tokens``, ``codec_embedding``), which is why the stack takes embeddings.

`Qwen3Stack.run` is one ragged forward over the paged pool (an `AttnStep`, as
`wgc_models.llama.model.LlamaDecoder`): it returns the final normed hidden states and,
when asked, the hidden states entering layer ``capture`` (HF's ``hidden_states[capture]``:
index 0 is the embeddings, index ``num_layers`` the normed output), which the Thinker streams
to the Talker (``accept_hidden_layer``).
"""

from __future__ import annotations

import torch
from torch import nn

from wgc_models.layers.attention import AttnStep
from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.mlp import MLP
from wgc_models.layers.norm import RMSNorm
from wgc_models.layers.rope import RopeTable, inv_freq
from wgc_models.qwen3_omni.moe import MoeConfig, SparseMoeBlock
from wgc_models.qwen3_omni.qk_attention import QKNormAttention

Rope = tuple[torch.Tensor, torch.Tensor]


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: DecoderConfig, moe: MoeConfig | None, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = QKNormAttention(cfg, index)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        sparse = moe is not None and moe.is_sparse(index)
        self.mlp: nn.Module = SparseMoeBlock(cfg, moe) if sparse and moe else MLP(cfg)

    def forward(self, x: torch.Tensor, rope: Rope, step: AttnStep) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, step)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Stack(nn.Module):
    """``layers`` + ``norm``, with the rotary table of ``cfg`` (not in checkpoints)."""

    inv_freq: torch.Tensor

    def __init__(self, cfg: DecoderConfig, moe: MoeConfig | None = None):
        super().__init__()
        self.config, self.moe = cfg, moe
        self.layers = nn.ModuleList(Qwen3Layer(cfg, moe, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", inv_freq(cfg), persistent=False)
        self._rope: RopeTable | None = None

    def rope_table(self, size: int, dtype: torch.dtype) -> RopeTable:
        """A table covering at least ``size`` positions (grown by doubling, kept)."""
        t, inv = self._rope, self.inv_freq
        if t is None or t.size < size or t.dtype != dtype or t.device != inv.device:
            grow = max(size, 2 * t.size if t is not None else 0, 256)
            t = self._rope = RopeTable(inv, grow, dtype)
        return t

    def run(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        step: AttnStep,
        capture: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Embeddings ``x`` ``[tokens, hidden]`` → normed hidden states, and the hidden states
        entering layer ``capture`` (``capture == num_layers``: the normed output)."""
        rope = self.rope_table(step.max_positions(), x.dtype).lookup(positions)
        kept = x if capture == 0 else None
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, step)
            if capture == i + 1:
                kept = x
        x = self.norm(x)
        if capture == len(self.layers):
            kept = x
        return x, kept
