"""Qwen3's attention: grouped-query attention over the paged KV pool with an RMSNorm on every
query and key head (``q_norm``, ``k_norm``, over ``head_dim``) before the rotary embedding.

Same KV path as `wgc_models.layers.attention.Attention` (q/k/v in one matrix product, the
plain ``backend.forward`` path, the static decode path of `StaticDecode`), so Qwen3 stacks run on
the same `PagedKVPool` / `AttentionBackend` pair and the same step metadata as the Llama
decoder. Used by the Qwen3-Omni Thinker, Talker and code predictor.

Multimodal rotary positions (M-RoPE). Qwen3-Omni rotates by three position ids per token
(time, height, width) interleaved over the frequencies (``mrope_section``). For text and audio
the three are equal, and equal positions make M-RoPE the plain rotary embedding of that
position: that is what is computed here (one position per token). Vision's 2-D positions are
not supported (the vision tower is left out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from wgc_models.layers.attention import Attention, AttnStep
from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.norm import RMSNorm
from wgc_models.layers.rope import apply_rope


class QKNormAttention(Attention):
    """`Attention` with per-head RMSNorm of queries and keys (names ``q_norm``, ``k_norm``)."""

    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__(cfg, index)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def attend(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], step: AttnStep
    ) -> torch.Tensor:
        t, h, hk = x.shape[0], self.heads, self.kv_heads
        w, b = self._qkv.get()
        qkv = F.linear(x, w, b).view(t, h + 2 * hk, self.head_dim)
        q = self.q_norm(qkv[:, :h])
        k = self.k_norm(qkv[:, h : h + hk])
        qk = apply_rope(torch.cat((q, k), dim=1), *rope)
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + hk :]
        kv_layer = step.pool.layer(self.index)
        backend, static = step.backend, step.static
        if static is None:
            backend.write_kv(kv_layer, k, v, step.slots)
            out = backend.forward(q, kv_layer, step.meta)
        elif static.meta is None:
            out = static.attend(q, k, v, kv_layer, backend.scale, self.index)
        else:
            backend.write_kv(kv_layer, k, v, step.slots)
            out = backend.decode(q, kv_layer, static.meta)
        return out.reshape(t, h * self.head_dim)
