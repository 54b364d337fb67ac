"""A rank's KV pools: one `PagedKVPool` per kv-cache node it hosts, as the plan sizes them.

`KvPools` is built from the nodes' `KvPoolSpec`s (`NodeSpec.kv`): a node's own pool holds its
declared labels (``main`` when it declares none); a ``like X { label L }`` copy on X's group
reads X's pool (``shared``), one on another group gets a pool of its own for label L, which the
runtime fills before each walk that reads it (`export_label` there, `import_label` here). It
hands out `KvHandle`s (the node API's ``ctx.kv``), frees a request's pages in every pool when
the request ends, and moves or copies a request's sequences for the plan's handoffs and copies.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import torch

from wgc_runtime.contract.spec import KvPoolSpec, RankSpec
from wgc_runtime.engines.attention.base import AttentionBackend
from wgc_runtime.engines.kv_handle import KvHandle
from wgc_runtime.engines.kv_pool import DTYPES, PAD_REQUEST, PagedKVPool

KV_PART = "kv:"  # the key prefix of a moved sequence in a node-state handoff ("kv:<label>")


class KvPools:
    """The pools of one rank (or of the reference interpreter) (module docstring)."""

    def __init__(
        self,
        specs: Mapping[str, KvPoolSpec],
        *,
        device: str | torch.device = "cpu",
        attention: str = "auto",
    ) -> None:
        self.specs = dict(specs)
        self.attention = attention
        self.pools: dict[str, PagedKVPool] = {}  # pool key: the owner, or the copy's name
        for node, spec in self.specs.items():
            if spec.shared:
                continue
            if spec.dtype not in DTYPES:
                raise ValueError(
                    f"node `{node}`: kv_cache dtype `{spec.dtype}` is not one the pool can hold "
                    f"({', '.join(sorted(DTYPES))})"
                )
            self.pools[self._key(node)] = PagedKVPool(
                layers=spec.layers,
                kv_heads=spec.kv_heads,
                head_dim=spec.head_dim,
                pages=spec.pages,
                page_size=spec.page_size,
                dtype=DTYPES[spec.dtype],
                device=device,
                labels=spec.labels,
            )
        self._backends: dict[str, dict[int, AttentionBackend]] = {k: {} for k in self.pools}

    @classmethod
    def of_rank(cls, rank: RankSpec, device: str | torch.device = "cpu") -> KvPools:
        specs = {n.name: n.kv for n in rank.nodes if n.kv is not None}
        return cls(specs, device=device, attention=str(rank.attention.backend))

    def _key(self, node: str) -> str:
        spec = self.specs[node]
        return spec.owner if spec.owner == node or spec.shared else node

    def pool(self, node: str) -> PagedKVPool:
        try:
            return self.pools[self._key(node)]
        except KeyError:
            raise KeyError(f"node `{node}` has no kv pool on this rank") from None

    def has(self, node: str) -> bool:
        return node in self.specs

    def handle(self, node: str, request: Hashable) -> KvHandle:
        spec = self.specs[node]
        key = self._key(node)
        copy = spec.owner != node
        return KvHandle(
            self.pools[key],
            request,
            spec.labels,
            node=node,
            writable=not copy or spec.writable,
            backends=self._backends[key],
            attention=self.attention,
        )

    # ------------------------------------------------------------------ lifetimes
    def free(self, request: Hashable) -> int:
        """Every page ``request`` holds, in every pool (its end, failure, cancel or deadline)."""
        return sum(p.free(request) for p in self.pools.values())

    def used_pages(self) -> dict[str, int]:
        """Pages the requests hold, per pool (the padding reserve not counted)."""
        return {key: p.used_pages - p.pages_of(PAD_REQUEST) for key, p in self.pools.items()}

    def check(self) -> None:
        for p in self.pools.values():
            p.check()

    # ------------------------------------------------------------------ moves and copies
    def export(self, node: str, request: Hashable) -> dict[str, torch.Tensor]:
        """The request's sequences in ``node``'s own pool, as ``{"kv:<label>": [layers, 2, len,
        kv_heads, head_dim]}``, then freed here (the state moves). A copy that reads its owner's
        pool holds nothing of its own: nothing moves with it."""
        if self.specs[node].shared:
            return {}
        pool = self.pool(node)
        out = {
            f"{KV_PART}{label}": pool.export_label(request, label)
            for label in self.specs[node].labels
            if pool.has(request, label)
        }
        pool.free(request)
        return out

    def import_(self, node: str, request: Hashable, parts: Mapping[str, torch.Tensor]) -> None:
        """Take what `export` produced on the old group."""
        pool = self.pool(node)
        for key, kv in parts.items():
            pool.import_label(request, key.removeprefix(KV_PART), kv)

    def export_label(self, node: str, request: Hashable, label: str) -> torch.Tensor:
        """One label of ``node``'s cache, kept here (a copy for another group)."""
        return self.pool(node).export_label(request, label)

    def import_label(self, node: str, request: Hashable, label: str, kv: torch.Tensor) -> None:
        self.pool(node).import_label(request, label, kv)
