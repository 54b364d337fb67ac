"""`StackEngine`: a `Qwen3Stack` over one `PagedKVPool` with one `AttentionBackend`, stepped
with embeddings.

The embeddings-in counterpart of `wgc_models.llama.engine.DecoderEngine` (same
pool, same backends, same ``prepare_step`` metadata; requests and labels are the pool's):
`forward` appends each sequence's new embeddings to its KV and returns their hidden states,
ragged. The Qwen3-Omni Thinker, Talker and code predictor each own one (the geometries
differ). The static (graph-capturable) decode path is not wired yet.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from wgc_models.layers.attention import AttnStep
from wgc_models.qwen3_omni.qwen3_stack import Qwen3Stack
from wgc_runtime.engines.attention.base import AttentionBackend, prepare_step
from wgc_runtime.engines.batching import Seq
from wgc_runtime.engines.kv_pool import PagedKVPool


def pool_for(
    stack: Qwen3Stack,
    *,
    pages: int,
    page_size: int = 16,
    labels: Sequence[str] | None = None,
    backend: type[AttentionBackend] | None = None,
) -> tuple[PagedKVPool, AttentionBackend]:
    """A pool and a backend (torch by default) sized for ``stack``, on its device and dtype."""
    from wgc_runtime.engines.attention.torch_backend import TorchAttention

    cfg = stack.config
    param = next(stack.parameters())
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
    return pool, be


class StackEngine:
    """A `Qwen3Stack` stepped over a pool: see the module docstring."""

    def __init__(self, stack: Qwen3Stack, pool: PagedKVPool, backend: AttentionBackend):
        cfg = stack.config
        if (pool.layers, pool.kv_heads, pool.head_dim) != (
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
        ):
            raise ValueError("pool geometry does not fit the stack's layers / kv heads / head dim")
        self.stack, self.pool, self.backend = stack, pool, backend
        self.device = pool.device

    @torch.inference_mode()
    def forward(
        self,
        seqs: Sequence[Seq],
        embeds: Sequence[torch.Tensor],
        *,
        capture: int | None = None,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Append ``embeds[i]`` (``[n_i, hidden]``) to sequence ``seqs[i]``, run them as one
        ragged batch: each sequence's normed hidden states ``[n_i, hidden]`` and, with
        ``capture``, its hidden states entering that layer (`Qwen3Stack.run`)."""
        lens = [int(e.shape[0]) for e in embeds]
        meta = prepare_step(
            self.pool, [(r, lab, n) for (r, lab), n in zip(seqs, lens, strict=True)]
        )
        self.backend.plan(meta)
        assert meta.slot_mapping is not None  # prepare_step maps every new token
        step = AttnStep(self.pool, self.backend, meta.slot_mapping, meta=meta)
        x = torch.cat(list(embeds)).to(self.device)
        hidden, kept = self.stack.run(x, meta.positions, step, capture)
        return (
            list(torch.split(hidden, lens)),
            None if kept is None else list(torch.split(kept, lens)),
        )

    def free(self, request: Hashable) -> None:
        self.pool.free(request)
