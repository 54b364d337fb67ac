"""A Llama/Qwen2-style decoder over the paged KV pool.

The module tree mirrors Hugging Face's ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` name for name
(``model.embed_tokens``, ``model.layers.{i}.self_attn.q_proj``, ..., ``model.norm``,
``lm_head``), so `wgc_runtime.components.loading.load_checkpoint` fills it from a checkpoint by
parameter name. Pieces: RMSNorm (normalised in fp32, like HF), rotary embeddings (``rope_theta``
and scaling from the config; rotate-half layout), grouped-query attention through an
`AttentionBackend` over a `PagedKVPool`, a SwiGLU MLP, a tied or untied ``lm_head``, and
Qwen2's q/k/v biases.

Tokens are *ragged*: a forward takes the concatenated tokens of several sequences (one
sequence = one (request, label) of the pool) with their positions, and an `AttnStep` that says
where their K/V go and what they attend to:

* the plain path: an `AttentionMetadata` from ``prepare_step`` (any mix of prefill and decode),
  through ``backend.forward``;
* the static path (`StaticDecode`): one token per row of fixed-shape buffers (page tables
  padded to a fixed width, kv lengths, slots): no host synchronisation and no data-dependent
  shapes, so a CUDA graph can capture it; `DecoderEngine.decode_unit` builds it for
  `wgc_runtime.engines.cuda_graph.GraphRunner`.

`DecoderEngine` ties model, pool and backend together: prefill, decode, fork, free, and the
static decode unit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from wgc_runtime.attention.base import AttentionBackend, AttentionMetadata, prepare_step
from wgc_runtime.components.config import DecoderConfig
from wgc_runtime.components.loading import load_checkpoint
from wgc_runtime.engines.cuda_graph import StaticBuffer
from wgc_runtime.engines.kv_pool import PagedKVPool

# backends whose `decode` reads only metadata tensors (block_tables, kv_lens_t) and never
# synchronises with the host: safe inside a captured graph with static metadata buffers
CAPTURABLE_DECODE = frozenset({"triton"})
PAD_REQUEST = "__wgc_pad__"  # owns the scratch page that padding rows write their K/V into


# ---------------------------------------------------------------- building blocks


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def inv_freq(cfg: DecoderConfig) -> torch.Tensor:
    """Rotary inverse frequencies (fp32, ``[head_dim / 2]``), with the config's scaling."""
    d = cfg.head_dim
    freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if cfg.rope_type == "linear":
        return freq / cfg.rope_factor
    if cfg.rope_type == "llama3":
        low = cfg.rope_original_max_pos / cfg.rope_low_freq_factor
        high = cfg.rope_original_max_pos / cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / freq
        scaled = torch.where(wavelen > low, freq / cfg.rope_factor, freq)
        smooth = (cfg.rope_original_max_pos / wavelen - cfg.rope_low_freq_factor) / (
            cfg.rope_high_freq_factor - cfg.rope_low_freq_factor
        )
        mid = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
        is_mid = (wavelen >= high) & (wavelen <= low)
        return torch.where(is_mid, mid, scaled)
    return freq


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(h, i, bias=b)
        self.up_proj = nn.Linear(h, i, bias=b)
        self.down_proj = nn.Linear(i, h, bias=b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ---------------------------------------------------------------- attention over the pool


@dataclass(slots=True)
class StaticDecode:
    """Fixed-shape decode metadata (one query per row): graph-capturable."""

    block_tables: torch.Tensor  # int32 [batch, width]
    kv_lens: torch.Tensor  # int32 [batch], including this step's token (≥ 1, also on padding)
    meta: AttentionMetadata | None = None  # for capturable backends: views of the same buffers


@dataclass(slots=True)
class AttnStep:
    """Where one forward's K/V go (``slots``, one per token) and what its queries attend to:
    ``meta`` (the plain path) or ``static`` (the static decode path)."""

    pool: PagedKVPool
    backend: AttentionBackend
    slots: torch.Tensor
    meta: AttentionMetadata | None = None
    static: StaticDecode | None = None


def padded_decode(
    q: torch.Tensor,
    kv_layer: torch.Tensor,
    block_tables: torch.Tensor,
    kv_lens: torch.Tensor,
    scale: float,
    group: int,
) -> torch.Tensor:
    """Decode attention from fixed-shape metadata: gather every row's ``width`` pages, mask
    positions ≥ its length. ``q`` ``[batch, heads, dim]`` → same shape. Static shapes only."""
    b, width = block_tables.shape
    idx = block_tables.reshape(-1).long()
    ps, kvh, d = kv_layer.shape[2], kv_layer.shape[3], kv_layer.shape[4]
    # index_select on the page dim (several times faster than advanced indexing on the CPU)
    k = kv_layer[:, 0].index_select(0, idx).view(b, width * ps, kvh, d).transpose(1, 2)
    v = kv_layer[:, 1].index_select(0, idx).view(b, width * ps, kvh, d).transpose(1, 2)
    pos = torch.arange(width * ps, device=q.device)
    mask = (pos[None, :] < kv_lens.long()[:, None]).view(b, 1, 1, width * ps)
    # a KV head's `group` query heads become `group` query rows against it: no K/V repeat
    qg = q.to(k.dtype).reshape(b, kvh, group, d)
    out = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale)
    return out.reshape(b, kvh * group, d).to(q.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.index = index
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=cfg.o_bias)

    def forward(self, x, cos, sin, step: AttnStep) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.heads, self.head_dim)
        k = self.k_proj(x).view(t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.kv_heads, self.head_dim)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        kv_layer = step.pool.layer(self.index)
        backend = step.backend
        backend.write_kv(kv_layer, k, v, step.slots)
        if step.static is None:
            out = backend.forward(q, kv_layer, step.meta)
        elif step.static.meta is not None:
            out = backend.decode(q, kv_layer, step.static.meta)
        else:
            s = step.static
            out = padded_decode(
                q, kv_layer, s.block_tables, s.kv_lens, backend.scale, backend.group
            )
        return self.o_proj(out.reshape(t, self.heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, index)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, step: AttnStep) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, step)
        return x + self.mlp(self.post_attention_layernorm(x))


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

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.config = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", inv_freq(cfg), persistent=False)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> LlamaDecoder:
        """Build from ``config.json`` and load the safetensors weights, strictly."""
        cfg = DecoderConfig.from_pretrained(path)
        model = cls(cfg)
        optional = ("lm_head.weight",) if cfg.tie_word_embeddings else ()
        load_checkpoint(model, path, optional=optional)
        return model.to(device=device, dtype=dtype).eval()

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype):
        """``cos``, ``sin`` of ``[tokens, 1, head_dim]`` (computed in fp32, like HF)."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, step: AttnStep):
        x = self.model.embed_tokens(tokens)
        cos, sin = self.rotary(positions, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, step)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


# ---------------------------------------------------------------- the engine


Seq = tuple[Hashable, str]  # (request, label)


class DecoderEngine:
    """A `LlamaDecoder` over one `PagedKVPool` with one `AttentionBackend`.

    Requests and labels are the pool's; `prefill` and `decode` append to the named sequences.
    One pool page is kept aside for padding rows of static decode steps (their K/V land there).
    """

    def __init__(self, model: LlamaDecoder, pool: PagedKVPool, backend: AttentionBackend):
        cfg = model.config
        if (pool.layers, pool.kv_heads, pool.head_dim) != (
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
        ):
            raise ValueError(
                f"pool geometry (layers {pool.layers}, kv heads {pool.kv_heads}, head dim "
                f"{pool.head_dim}) does not fit the model ({cfg.num_layers}, "
                f"{cfg.num_kv_heads}, {cfg.head_dim})"
            )
        self.model, self.pool, self.backend = model, pool, backend
        self.device = pool.device
        self._pad_slot: int | None = None

    @classmethod
    def build(
        cls,
        model: LlamaDecoder,
        *,
        pages: int,
        page_size: int = 16,
        backend: type[AttentionBackend] | None = None,
        labels: Sequence[str] | None = None,
    ) -> DecoderEngine:
        """A pool and a backend sized for ``model`` (backend defaults to torch)."""
        from wgc_runtime.attention.torch_backend import TorchAttention

        cfg = model.config
        param = next(model.parameters())
        pool = PagedKVPool(
            layers=cfg.num_layers,
            kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            pages=pages,
            page_size=page_size,
            dtype=param.dtype,
            device=param.device,
            labels=labels,
        )
        be = (backend or TorchAttention)(
            num_heads=cfg.num_heads,
            num_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            page_size=page_size,
            device=param.device,
            dtype=param.dtype,
        )
        return cls(model, pool, be)

    # ------------------------------------------------------------ the plain path

    @torch.no_grad()
    def forward(
        self, seqs: Sequence[Seq], tokens: Sequence[torch.Tensor], *, all_logits: bool = False
    ) -> torch.Tensor | list[torch.Tensor]:
        """Append ``tokens[i]`` (1-D) to sequence ``seqs[i]`` and run them in one ragged batch.

        Returns the logits of each sequence's last token ``[len(seqs), vocab]`` (fp32), or with
        ``all_logits`` a list of ``[len(tokens[i]), vocab]``.
        """
        lens = [int(t.numel()) for t in tokens]
        meta = prepare_step(
            self.pool, [(r, lab, n) for (r, lab), n in zip(seqs, lens, strict=True)]
        )
        self.backend.plan(meta)
        flat = torch.cat([t.reshape(-1) for t in tokens]).to(self.device, torch.long)
        step = AttnStep(self.pool, self.backend, meta.slot_mapping, meta=meta)
        hidden = self.model(flat, meta.positions, step)
        if all_logits:
            return list(self.model.logits(hidden).split(lens))
        last = torch.tensor(lens, device=self.device).cumsum(0) - 1
        return self.model.logits(hidden[last])

    def prefill(self, seqs: Sequence[Seq], prompts: Sequence[torch.Tensor], **kw):
        return self.forward(seqs, prompts, **kw)

    def decode(self, seqs: Sequence[Seq], tokens: torch.Tensor) -> torch.Tensor:
        """One token per sequence (``tokens`` ``[len(seqs)]``) → logits ``[len(seqs), vocab]``."""
        return self.forward(seqs, [t.reshape(1) for t in tokens.reshape(-1)])

    def fork(self, request: Hashable, src: str, dst: str) -> None:
        self.pool.fork(request, src, dst)

    def free(self, request: Hashable) -> None:
        self.pool.free(request)

    # ------------------------------------------------------------ the static decode path

    @property
    def pad_slot(self) -> int:
        """A slot on a page of its own where padding rows write (allocated once)."""
        if self._pad_slot is None:
            self._pad_slot = int(self.pool.append(PAD_REQUEST, self._pad_label(), 1)[0])
        return self._pad_slot

    def close(self) -> None:
        """Give back the padding page (the pool is then empty once every request is freed)."""
        self.pool.free(PAD_REQUEST)
        self._pad_slot = None

    def _pad_label(self) -> str:
        labels = self.pool.labels
        return "main" if labels is None or "main" in labels else sorted(labels)[0]

    def width_for(self, max_len: int) -> int:
        """Page-table width of static buffers for sequences up to ``max_len`` tokens."""
        return self.pool.pages_for(max_len)

    def decode_buffers(self, width: int) -> dict[str, StaticBuffer]:
        """The static inputs of one decode step (per row): token, position, slot, kv length,
        page table. Padding rows write to the scratch slot and attend to one token."""
        pad_page = self.pad_slot // self.pool.page_size
        return {
            "tokens": StaticBuffer((), torch.long, 0),
            "positions": StaticBuffer((), torch.long, 0),
            "slots": StaticBuffer((), torch.long, self.pad_slot),
            "kv_lens": StaticBuffer((), torch.int32, 1),
            "block_tables": StaticBuffer((width,), torch.int32, pad_page),
        }

    def decode_unit(self, bufs) -> dict[str, torch.Tensor]:
        """One static decode step over the buffers of `decode_buffers`: logits and the greedy
        next token per row. Shape-static and free of host syncs (capturable)."""
        with torch.no_grad():
            static = StaticDecode(bufs["block_tables"], bufs["kv_lens"])
            if self.backend.name in CAPTURABLE_DECODE:
                static.meta = _static_meta(bufs, self.pool.page_size)
            step = AttnStep(self.pool, self.backend, bufs["slots"], static=static)
            hidden = self.model(bufs["tokens"], bufs["positions"], step)
            logits = self.model.logits(hidden)
            return {"logits": logits, "next_token": logits.argmax(-1)}


def _static_meta(bufs, page_size: int) -> AttentionMetadata:
    """Metadata whose tensors are the static buffers (for backends in `CAPTURABLE_DECODE`,
    which read only ``block_tables`` and ``kv_lens_t``; the host fields are placeholders)."""
    b = bufs["tokens"].shape[0]
    zeros = torch.zeros(b + 1, dtype=torch.int32, device=bufs["tokens"].device)
    return AttentionMetadata(
        page_size=page_size,
        tables=((),) * b,
        q_lens=(1,) * b,
        kv_lens=(1,) * b,
        qo_indptr=zeros,
        kv_indptr=zeros,
        kv_indices=zeros[:0],
        kv_last_page_len=bufs["kv_lens"],
        kv_lens_t=bufs["kv_lens"],
        block_tables=bufs["block_tables"],
        positions=bufs["positions"],
        slot_mapping=bufs["slots"],
    )
