"""GPT-2's architecture (transformers' ``GPT2LMHeadModel``) over the runtime's paged KV pool.

Learned positions (``wpe``) added to the token embeddings (``wte``); pre-LayerNorm blocks of
attention (q, k and v from ONE projection, ``c_attn``) and a GELU MLP (the tanh approximation,
GPT-2's ``gelu_new``); a final LayerNorm; the LM head is the token embedding (tied). Module
names are the checkpoint's (``h.{i}.attn.c_attn``, ``ln_f``, ...), so `checkpoint.py` only
transposes GPT-2's ``Conv1D`` weights into ``nn.Linear``'s layout.

`GPT2.forward` takes ragged tokens (the new tokens of several requests, concatenated), their
positions and an `AttnStep` (`wgc_models.layers.attention`, shared with the Llama
decoder) saying where their keys and values go in the pool: one call serves prefill rows,
decode rows and the captured decode step. `last_logits` and `decode_unit` are those two
uses, written against the pool and an attention backend.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.attention import CAPTURABLE_DECODE, AttnStep, StaticDecode, static_meta
from wgc_runtime.engines.attention.base import AttentionBackend, prepare_step
from wgc_runtime.engines.kv_pool import PagedKVPool


@dataclass(frozen=True, slots=True)
class GPT2Config:
    """The sizes (``config.json``'s ``vocab_size``, ``n_positions``, ``n_embd``, ``n_layer``,
    ``n_head``, ``n_inner``, ``layer_norm_epsilon``)."""

    vocab: int
    positions: int
    hidden: int
    layers: int
    heads: int
    inner: int = 0  # the MLP's width; 0: 4 * hidden
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class Attention(nn.Module):
    """Causal self-attention of layer ``index`` over pool layer ``index``."""

    def __init__(self, cfg: GPT2Config, index: int):
        super().__init__()
        self.index, self.heads, self.head_dim = index, cfg.heads, cfg.head_dim
        self.c_attn = nn.Linear(cfg.hidden, 3 * cfg.hidden)  # q, k, v (each `hidden` wide)
        self.c_proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor, step: AttnStep) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.c_attn(x).view(t, 3, self.heads, self.head_dim).unbind(1)
        kv_layer = step.pool.layer(self.index)
        backend, static = step.backend, step.static
        if static is None:  # prefill and decode rows, metadata built on the host
            backend.write_kv(kv_layer, k, v, step.slots)
            out = backend.forward(q, kv_layer, step.meta)
        elif static.meta is None:  # a captured decode step: torch's indexed attention
            out = static.attend(q, k, v, kv_layer, backend.scale, self.index)
        else:  # a captured decode step on a backend that reads the static buffers itself
            backend.write_kv(kv_layer, k, v, step.slots)
            out = backend.decode(q, kv_layer, static.meta)
        return self.c_proj(out.reshape(t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        inner = cfg.inner or 4 * cfg.hidden
        self.c_fc = nn.Linear(cfg.hidden, inner)
        self.c_proj = nn.Linear(inner, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config, index: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = Attention(cfg, index)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, step: AttnStep) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), step)
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """Ragged tokens and positions → final hidden states; `logits` maps them to the vocabulary
    through the tied token embedding."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.positions, cfg.hidden)
        self.h = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, step: AttnStep
    ) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x, step)
        return self.ln_f(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.wte.weight).float()


Seq = tuple[Hashable, str]  # a sequence of the pool: (request, label)


@torch.inference_mode()
def last_logits(
    model: GPT2,
    pool: PagedKVPool,
    backend: AttentionBackend,
    seqs: Sequence[Seq],
    tokens: Sequence[torch.Tensor],
) -> torch.Tensor:
    """Append ``tokens[i]`` (1-D) to sequence ``seqs[i]`` and run all of them as one ragged
    batch: the logits of each sequence's last token, ``[len(seqs), vocab]``."""
    lens = [int(t.numel()) for t in tokens]
    meta = prepare_step(pool, [(r, label, n) for (r, label), n in zip(seqs, lens, strict=True)])
    backend.plan(meta)
    assert meta.slot_mapping is not None  # prepare_step maps every new token
    flat = torch.cat(list(tokens)).to(pool.device, torch.long)
    hidden = model(flat, meta.positions, AttnStep(pool, backend, meta.slot_mapping, meta=meta))
    last = torch.tensor(lens, device=pool.device).cumsum(0) - 1
    return model.logits(hidden[last])


@torch.inference_mode()
def decode_unit(
    model: GPT2, pool: PagedKVPool, backend: AttentionBackend, bufs: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    """One captured decode step: a token per row of fixed-shape buffers (``tokens``,
    ``positions``, ``slots``, ``kv_lens``, ``block_tables``); the greedy next token per row.
    On a GPU it never reads back to the host (a CUDA graph replays it); eager on the CPU, it
    reads the longest row's length once, to attend over the pages in use only."""
    static = StaticDecode(bufs["block_tables"], bufs["kv_lens"])
    if backend.name in CAPTURABLE_DECODE:
        static.meta = static_meta(bufs, pool.page_size)
    else:
        static.prepare(bufs["slots"], pool, dynamic=pool.device.type == "cpu")
    step = AttnStep(pool, backend, bufs["slots"], static=static)
    return model.logits(model(bufs["tokens"], bufs["positions"], step)).argmax(-1)
