"""One request's view of a kv-cache node's paged pool: the `KvCache` a call gets as ``ctx.kv``.

A `KvHandle` names a pool, a request (the pool's key for it) and the labels the node may touch:
its declared labels, or the one label a ``like X { label L }`` copy reads (read-only). Keys and
values are ``[layers, tokens, kv_heads, head_dim]``; `attend` is the pool's paged attention:
causal over the sequence's own last positions through the placement's attention backend
(`wgc_runtime.engines.attention`; the torch reference on the CPU), or, for queries that are not
in the cache (``causal=False``: denoising latents attending to a prefix), plain attention over
the gathered keys and values. A sequence with no token attends to nothing: zeros.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch
import torch.nn.functional as F

from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata
from wgc_runtime.engines.attention.select import make_backend
from wgc_runtime.engines.kv_pool import PagedKVPool


class KvReadOnly(RuntimeError):
    """A write through a handle that may only read (a ``like X { label L }`` copy)."""


class KvHandle:
    """The `wgc_runtime.contract.node.KvCache` of one (request, node) (module docstring)."""

    def __init__(
        self,
        pool: PagedKVPool,
        request: Hashable,
        labels: tuple[str, ...],
        *,
        node: str,
        writable: bool = True,
        backends: dict[int, AttentionBackend] | None = None,
        attention: str = "auto",
    ) -> None:
        self.pool = pool
        self.request = request
        self.labels = labels
        self.node = node
        self.writable = writable
        self.layers, self.kv_heads, self.head_dim = pool.layers, pool.kv_heads, pool.head_dim
        self._backends = backends if backends is not None else {}
        self._attention = attention

    def _label(self, label: str | None) -> str:
        name = label if label is not None else self.labels[0]
        if name not in self.labels:
            known = ", ".join(self.labels)
            raise KeyError(f"node `{self.node}` has no kv label `{name}` (its labels: {known})")
        return name

    def _writing(self, what: str) -> None:
        if not self.writable:
            raise KvReadOnly(
                f"node `{self.node}` reads kv label `{self.labels[0]}` of another node's cache: "
                f"it cannot {what}"
            )

    # ------------------------------------------------------------------ reads
    def length(self, label: str | None = None) -> int:
        return self.pool.seq_len(self.request, self._label(label))

    def keys_values(
        self, layer: int = 0, label: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool.gather(self.request, self._label(label), layer)

    def attend(
        self, q: torch.Tensor, layer: int = 0, label: str | None = None, *, causal: bool = True
    ) -> torch.Tensor:
        name = self._label(label)
        tokens, heads, _ = q.shape
        kv_len = self.pool.seq_len(self.request, name)
        if kv_len == 0:
            return torch.zeros_like(q)
        if not causal:
            k, v = self.pool.gather(self.request, name, layer)
            qq = q.to(k.dtype).transpose(0, 1).unsqueeze(0)  # [1, heads, tokens, dim]
            kk, vv = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)
            out = F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=heads != self.kv_heads)
            return out[0].transpose(0, 1).to(q.dtype)
        if tokens > kv_len:
            raise ValueError(
                f"{tokens} causal queries over a sequence of {kv_len} tokens (append them first)"
            )
        meta = AttentionMetadata.from_tables(
            [self.pool.page_table(self.request, name)],
            [kv_len],
            [tokens],
            self.pool.page_size,
            device=self.pool.device,
        )
        return self.backend(heads).forward(q, self.pool.layer(layer), meta)

    def backend(self, heads: int) -> AttentionBackend:
        """The placement's paged-attention backend for ``heads`` query heads over this pool
        (one per head count, shared by the pool's handles): ``plan`` then ``forward``."""
        dim = self.head_dim
        backend = self._backends.get(heads)
        if backend is None:
            backend = self._backends[heads] = make_backend(
                self._attention,
                num_heads=heads,
                num_kv_heads=self.kv_heads,
                head_dim=dim,
                page_size=self.pool.page_size,
                device=self.pool.device,
                dtype=self.pool.dtype,
            )
        return backend

    # ------------------------------------------------------------------ writes
    def append(self, k: torch.Tensor, v: torch.Tensor, label: str | None = None) -> None:
        self._writing("append")
        name = self._label(label)
        shape = (self.layers, k.shape[1] if k.dim() == 4 else -1, self.kv_heads, self.head_dim)
        if k.dim() != 4 or k.shape != v.shape or tuple(k.shape) != shape:
            raise ValueError(
                f"kv of node `{self.node}` must be [layers={self.layers}, tokens, "
                f"kv_heads={self.kv_heads}, head_dim={self.head_dim}]; got k {list(k.shape)}, "
                f"v {list(v.shape)}"
            )
        slots = self.pool.append(self.request, name, k.shape[1])
        self.pool.write(slots, k, v)

    def truncate(self, length: int, label: str | None = None) -> None:
        self._writing("truncate")
        self.pool.truncate(self.request, self._label(label), length)

    def fork(self, src: str, dst: str) -> None:
        self._writing("fork")
        self.pool.fork(self.request, self._label(src), self._label(dst))

    def drop(self, label: str) -> None:
        self._writing("drop")
        self.pool.drop(self.request, self._label(label))
