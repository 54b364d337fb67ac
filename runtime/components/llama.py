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

Per-token cost. A decode step of a small model is dominated by the number of tensor operations,
not their FLOPs, so the forward keeps that number low: q/k/v and gate/up each run as ONE matrix
product (`_Fused`: the HF-named parameters become views of one fused weight, so nothing is held
twice), rotary cos/sin come from a table by position (`RopeTable`) and rotate q and k together,
RMSNorm is ``F.rms_norm``, and the residual adds ride on ``addmm``. On the static path without a
capturable backend, `StaticDecode` derives its gather/scatter indices and the length mask once
per step (not once per layer) and attends with three batched matrix operations over exactly the
pages in use (on the CPU the page-table width is cut to the longest row; a GPU keeps the full
static width, so the step stays capturable).

`DecoderEngine` ties model, pool and backend together: prefill, decode, fork, free, and the
static decode unit.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from wgc_runtime.components.config import DecoderConfig
from wgc_runtime.components.loading import load_checkpoint
from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata, prepare_step
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
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # one op, the same math as below (x · rsqrt(mean(x²) + eps) · weight, in fp32)
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
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


class RopeTable:
    """cos and *signed* sin of every position below ``size`` (``[size, head_dim]``, computed
    in fp32 like HF, then cast): a step looks its positions up instead of recomputing them.

    With ``ssin = (-sin[:half], sin[half:])``, ``rotate_half(x) · sin == roll(x, half) · ssin``
    exactly (a sign flip is exact), so rotating is ``x · cos + roll(x) · ssin``.
    """

    def __init__(self, inv: torch.Tensor, size: int, dtype: torch.dtype):
        half = inv.shape[0]
        freqs = torch.arange(size, device=inv.device).float()[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin()
        sin[:, :half].neg_()
        self.size, self.half, self.dtype, self.device = size, half, dtype, inv.device
        self.cos, self.ssin = emb.cos().to(dtype), sin.to(dtype)

    def lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``, ``ssin`` of ``[tokens, 1, head_dim]`` for ``positions``."""
        return (
            self.cos.index_select(0, positions)[:, None, :],
            self.ssin.index_select(0, positions)[:, None, :],
        )


def apply_rope(x: torch.Tensor, cos: torch.Tensor, ssin: torch.Tensor) -> torch.Tensor:
    """``x · cos + rotate_half(x) · sin`` for ``x`` ``[tokens, heads, head_dim]``."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), ssin)


class _Fused:
    """One weight (and bias) for several linears that read the same input: one matrix product
    instead of several. The linears' parameters are re-pointed at slices of the fused tensor,
    so the model holds each weight once, in-place updates of a parameter (loading, ``copy_``)
    reach the fused weight, and a parameter that was replaced (``.to(dtype)``, a new
    ``Parameter``) is noticed by address and the fusion redone."""

    __slots__ = ("bias", "key", "linears", "weight")

    def __init__(self, linears: Sequence[nn.Linear]):
        self.linears = tuple(linears)
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.key: tuple = ()

    def _addresses(self) -> tuple:
        # `_parameters` directly: this runs every step, Module.__getattr__ is slow
        return tuple(
            -1 if p is None else p.data_ptr()
            for m in self.linears
            for p in (m._parameters["weight"], m._parameters["bias"])
        )

    def get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.weight is not None and torch.compiler.is_compiling():
            # a compiled step (`GraphRunner` backend "inductor") cannot compare addresses; its
            # eager warm-up built the fusion, and it captures the fused tensors like a graph
            return self.weight, self.bias
        if self._addresses() != self.key:
            self._build()
        return self.weight, self.bias

    def _build(self) -> None:
        with torch.inference_mode(False), torch.no_grad():
            self.weight = torch.cat([m.weight.detach() for m in self.linears])
            with_bias = [m.bias is not None for m in self.linears]
            self.bias = None
            if any(with_bias):
                self.bias = torch.cat(
                    [
                        m.bias.detach()
                        if m.bias is not None
                        else m.weight.new_zeros(m.weight.shape[0])
                        for m in self.linears
                    ]
                )
            start = 0
            for m in self.linears:
                n = m.weight.shape[0]
                m.weight.data = self.weight[start : start + n]
                if m.bias is not None:
                    m.bias.data = self.bias[start : start + n]
                start += n
        self.key = self._addresses()


def _linear_add(x: torch.Tensor, a: torch.Tensor, lin: nn.Linear) -> torch.Tensor:
    """``x + lin(a)``, the residual add fused into the matrix product when there is no bias."""
    if lin.bias is None and x.dim() == 2:
        return torch.addmm(x, a, lin.weight.t())
    return x + lin(a)


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(h, i, bias=b)
        self.up_proj = nn.Linear(h, i, bias=b)
        self.down_proj = nn.Linear(i, h, bias=b)
        self._gate_up = _Fused((self.gate_proj, self.up_proj))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """``silu(gate(x)) * up(x)``: the input of ``down_proj``."""
        w, b = self._gate_up.get()
        gu = F.linear(x, w, b)
        i = self.gate_proj.weight.shape[0]
        return F.silu(gu[..., :i]) * gu[..., i:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.hidden(x))


# ---------------------------------------------------------------- attention over the pool


@dataclass(slots=True)
class StaticDecode:
    """Fixed-shape decode metadata (one query per row): graph-capturable.

    ``meta`` is set for capturable backends (their ``decode`` reads views of these buffers).
    Otherwise `prepare` derives, once per step, what every layer's `attend` needs.
    """

    block_tables: torch.Tensor  # int32 [batch, width]
    kv_lens: torch.Tensor  # int32 [batch], including this step's token (≥ 1, also on padding)
    meta: AttentionMetadata | None = None  # for capturable backends: views of the same buffers
    write: tuple[torch.Tensor, torch.Tensor] | None = None  # pool rows of this step's K, V
    # compiled steps: (page, K/V half, offset) of this step's K then V rows, written through the
    # pool tensor itself (`prepare` with ``through_pool``)
    put: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    pool_kv: torch.Tensor | None = None
    gather: torch.Tensor | None = None  # int64 [2 * batch * kv_heads * len]: rows to attend
    bias: torch.Tensor | None = None  # [batch * kv_heads, 1, len]: 0, or -inf past a row's end

    def prepare(
        self, slots: torch.Tensor, pool: PagedKVPool, dynamic: bool, through_pool: bool = False
    ) -> None:
        """Indices into the flat views of a pool layer (`attend`), the same for every layer.

        ``dynamic`` (eager on the CPU): attend only to the pages in use, up to the longest
        row (a cheap host read there); else the full static width, with no host sync.

        ``through_pool`` (a step compiled by `torch.compile`): this step's K/V are written with
        ONE ``index_put_`` on the pool tensor itself instead of ``index_copy_`` on a view of a
        layer. A compiler functionalises mutations; a mutated *view* is scattered back into its
        base by copying the whole base (measured: the whole pool copied twice per layer, slower
        than eager), while a mutation of the base is turned back into an in-place scatter.
        """
        ps, hk = pool.page_size, pool.kv_heads
        b, width = self.block_tables.shape
        if dynamic:
            width = min(width, max(1, -(-int(self.kv_lens.max()) // ps)))
        n = width * ps
        # K rows of a layer viewed as [pages * 2 * page_size, kv_heads, dim]; V is page_size on
        # (page * 2 * page_size + offset == slot + page * page_size)
        k_row = slots.long() + torch.div(slots, ps, rounding_mode="floor") * ps
        self.write = (k_row, k_row + ps)
        if through_pool:
            page = torch.div(slots, ps, rounding_mode="floor").long()
            off = slots.long() - page * ps
            half = torch.zeros_like(page)
            self.put = (torch.cat((page, page)), torch.cat((half, half + 1)), torch.cat((off, off)))
            self.pool_kv = pool.kv
        # rows of the layer viewed as [pages * 2 * page_size * kv_heads, dim], ordered
        # [K/V, row, kv head, token]: one gather yields each head's keys contiguously
        pages = self.block_tables[:, :width].long() * (2 * ps * hk)
        self.gather = (pages.view(1, b, 1, width, 1) + _offsets(ps, hk, pool.device)).view(-1)
        pos = torch.arange(n, device=pool.device)
        beyond = pos[None, :] >= self.kv_lens.long()[:, None]  # [batch, n]
        bias = torch.zeros((b, 1, 1, n), dtype=_attn_dtype(pool.dtype), device=pool.device)
        bias.masked_fill_(beyond.view(b, 1, 1, n), float("-inf"))
        self.bias = bias.expand(b, hk, 1, n).reshape(b * hk, 1, n)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_layer: torch.Tensor,
        scale: float,
        layer: int = 0,
    ) -> torch.Tensor:
        """Write this step's ``k``/``v`` (``[batch, kv_heads, dim]``) and attend ``q``
        (``[batch, heads, dim]``) over each row's pages: ``[batch, heads, dim]``.
        ``kv_layer`` is pool layer ``layer``."""
        b, h, d = q.shape
        hk = k.shape[1]
        if self.put is not None:  # through the pool tensor (see `prepare`)
            page, half, off = self.put
            kv = self.pool_kv
            at = (torch.full_like(page, layer), page, half, off)
            kv.index_put_(at, torch.cat((k, v)).to(kv.dtype))
        else:
            flat = kv_layer.view(-1, hk, d)
            flat.index_copy_(0, self.write[0], k.to(flat.dtype))
            flat.index_copy_(0, self.write[1], v.to(flat.dtype))
        kv = kv_layer.view(-1, d).index_select(0, self.gather)
        kv = kv.view(2, b * hk, -1, d).to(self.bias.dtype)
        # a kv head's query heads become rows of one product against its keys: no K/V repeat
        qq = q.reshape(b * hk, h // hk, d).to(kv.dtype)
        s = torch.baddbmm(self.bias, qq, kv[0].transpose(1, 2), alpha=scale)
        out = torch.bmm(s.softmax(-1), kv[1])
        return out.view(b, h, d).to(q.dtype)


_OFFSETS: dict[tuple, torch.Tensor] = {}


def _offsets(ps: int, hk: int, device: torch.device) -> torch.Tensor:
    """``[2, 1, kv_heads, 1, page_size]`` row offsets inside a page, for `StaticDecode.gather`:
    K or V (``kv · page_size · kv_heads``), token (``t · kv_heads``), head."""
    key = (ps, hk, device)
    off = _OFFSETS.get(key)
    if off is None:
        kv = torch.arange(2, device=device).view(2, 1, 1, 1, 1) * (ps * hk)
        head = torch.arange(hk, device=device).view(1, 1, hk, 1, 1)
        tok = torch.arange(ps, device=device).view(1, 1, 1, 1, ps) * hk
        off = _OFFSETS[key] = kv + head + tok
    return off


def _attn_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision K/V are attended in fp32 (like the torch backend)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@dataclass(slots=True)
class AttnStep:
    """Where one forward's K/V go (``slots``, one per token) and what its queries attend to:
    ``meta`` (the plain path) or ``static`` (the static decode path)."""

    pool: PagedKVPool
    backend: AttentionBackend
    slots: torch.Tensor
    meta: AttentionMetadata | None = None
    static: StaticDecode | None = None

    def max_positions(self) -> int:
        """How many positions this step's rotary table must cover (known on the host)."""
        if self.meta is not None:
            return self.meta.max_kv_len
        return self.static.block_tables.shape[1] * self.pool.page_size


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
        self._qkv = _Fused((self.q_proj, self.k_proj, self.v_proj))

    def attend(self, x, rope: tuple[torch.Tensor, torch.Tensor], step: AttnStep) -> torch.Tensor:
        """Attention before ``o_proj``: ``[tokens, heads * head_dim]``."""
        t, h, hk = x.shape[0], self.heads, self.kv_heads
        w, b = self._qkv.get()
        qkv = F.linear(x, w, b).view(t, h + 2 * hk, self.head_dim)
        qk = apply_rope(qkv[:, : h + hk], *rope)  # q and k rotated together
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + hk :]
        kv_layer = step.pool.layer(self.index)
        backend, static = step.backend, step.static
        if static is not None and static.meta is None:
            out = static.attend(q, k, v, kv_layer, backend.scale, self.index)
        else:
            backend.write_kv(kv_layer, k, v, step.slots)
            if static is None:
                out = backend.forward(q, kv_layer, step.meta)
            else:
                out = backend.decode(q, kv_layer, static.meta)
        return out.reshape(t, h * self.head_dim)

    def forward(self, x, rope, step: AttnStep) -> torch.Tensor:
        return self.o_proj(self.attend(x, rope, step))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, index)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, rope, step: AttnStep) -> torch.Tensor:
        attn = self.self_attn.attend(self.input_layernorm(x), rope, step)
        x = _linear_add(x, attn, self.self_attn.o_proj)
        mlp = self.mlp.hidden(self.post_attention_layernorm(x))
        return _linear_add(x, mlp, self.mlp.down_proj)


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
        self._rope: RopeTable | None = None

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

    def rope_table(self, size: int, dtype: torch.dtype) -> RopeTable:
        """A `RopeTable` covering at least ``size`` positions (grown by doubling, kept)."""
        t = self._rope
        inv = self.inv_freq
        if t is None or t.size < size or t.dtype != dtype or t.device != inv.device:
            grow = max(size, 2 * t.size if t is not None else 0, 256)
            t = self._rope = RopeTable(inv, grow, dtype)
        return t

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, step: AttnStep):
        x = self.model.embed_tokens(tokens)
        rope = self.rope_table(step.max_positions(), x.dtype).lookup(positions)
        for layer in self.model.layers:
            x = layer(x, rope, step)
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
        from wgc_runtime.engines.attention.torch_backend import TorchAttention

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

    @torch.inference_mode()
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
        # built now, not on the first step: that step may be a CUDA-graph capture
        self.model.rope_table(width * self.pool.page_size, self.model.model.norm.weight.dtype)
        return {
            "tokens": StaticBuffer((), torch.long, 0),
            "positions": StaticBuffer((), torch.long, 0),
            "slots": StaticBuffer((), torch.long, self.pad_slot),
            "kv_lens": StaticBuffer((), torch.int32, 1),
            "block_tables": StaticBuffer((width,), torch.int32, pad_page),
        }

    def decode_unit(self, bufs, *, compiled: bool = False) -> dict[str, torch.Tensor]:
        """One static decode step over the buffers of `decode_buffers`: logits and the greedy
        next token per row. Shape-static and free of host syncs (capturable).

        ``compiled``: the form for `torch.compile` (`GraphRunner` backend ``"inductor"``, via
        `compiled_decode_unit`): the full static page-table width (no host read) and K/V
        written through the pool tensor (`StaticDecode.prepare`); it leaves inference mode to
        its caller (dynamo cannot trace into it; the runner enters it around the compiled step)."""
        with contextlib.nullcontext() if compiled else torch.inference_mode():
            static = StaticDecode(bufs["block_tables"], bufs["kv_lens"])
            if self.backend.name in CAPTURABLE_DECODE:
                static.meta = _static_meta(bufs, self.pool.page_size)
            elif compiled:
                static.prepare(bufs["slots"], self.pool, dynamic=False, through_pool=True)
            else:
                # eager on the CPU: cut the page tables to the pages in use
                static.prepare(bufs["slots"], self.pool, dynamic=self.device.type == "cpu")
            step = AttnStep(self.pool, self.backend, bufs["slots"], static=static)
            hidden = self.model(bufs["tokens"], bufs["positions"], step)
            logits = self.model.logits(hidden)
            return {"logits": logits, "next_token": logits.argmax(-1)}

    def compiled_decode_unit(self, bufs) -> dict[str, torch.Tensor]:
        """`decode_unit` in its form for `torch.compile` (``compiled=True``)."""
        return self.decode_unit(bufs, compiled=True)

    def unit_for(self, backend: str):
        """The decode unit a `GraphRunner` with ``backend`` should run."""
        return self.compiled_decode_unit if backend == "inductor" else self.decode_unit


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
