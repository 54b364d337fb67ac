"""Admission by KV pages: a request starts only when every KV pool can promise it its pages.

The plan lists every pool of the deployment (`ConductorSpec.kv_budgets`: node, rank group,
pages, and the pages one request may hold, from the node's ``config kv_tokens`` or the
compiler's bound). A request is promised ``pages_per_request`` in each of them while it runs,
and gives them back when it ends for any reason. With sessions, part of each pool is kept for
the idle ones (`parked_pages`) and never promised. It waits in the (bounded) queue while some pool
cannot promise its pages, and is refused at once, with the pool, the pages it needs and the pages
there are, when a pool could never hold it. Within a pool, the runtime's allocator is the
ground truth: a node that appends more than the plan promised fails its request with the pool's
numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc_runtime.contract.conductor import KvBudget

if TYPE_CHECKING:
    from wgc_runtime.core.conductor.core import ConductorCore

PoolKey = tuple[str, tuple[int, ...]]


def _pool_name(b: KvBudget) -> str:
    ranks = ", ".join(str(r) for r in b.ranks)
    return f"the kv pool of `{b.node}` on rank{'s' if len(b.ranks) != 1 else ''} {ranks}"


def parked_pages(max_sessions: int, session_pages: int, pages: int) -> int:
    """The pages of a pool of ``pages`` kept for idle sessions (never promised to requests):
    ``sessions.max_pages``, or half the pool when it is not set; 0 without sessions. The ranks
    evict sessions past the same number (`wgc_runtime.core.executor.sessions`)."""
    if max_sessions <= 0:
        return 0
    return min(pages, session_pages) if session_pages > 0 else pages // 2


def _capacity(self: ConductorCore, b: KvBudget) -> int:
    kv = self.spec.kv_cache
    return b.pages - parked_pages(kv.max_sessions, kv.session_pages, b.pages)


def _never_fits(self: ConductorCore, request_id: str) -> str | None:
    """Why the request can never be admitted (a pool smaller than what it needs), or None."""
    for b in self.spec.kv_budgets:
        cap = _capacity(self, b)
        if b.pages_per_request > cap:
            kept = "" if cap == b.pages else f" ({b.pages - cap} kept for idle sessions)"
            return (
                f"request `{request_id}` needs {b.pages_per_request} page(s) of "
                f"{_pool_name(b)}, which has {cap}{kept}: raise `kv_cache.pages` in the "
                f"placement, or lower the node's `config kv_tokens`"
                + (" or `sessions.max_pages`" if kept else "")
            )
    return None


def _fits(self: ConductorCore) -> bool:
    """Whether every pool can promise one more request its pages now."""
    return all(
        self.kv_used.get((b.node, b.ranks), 0) + b.pages_per_request <= _capacity(self, b)
        for b in self.spec.kv_budgets
    )


def _promise(self: ConductorCore, sign: int) -> None:
    """Take (``sign`` 1) or give back (-1) one request's pages in every pool."""
    for b in self.spec.kv_budgets:
        key = (b.node, b.ranks)
        self.kv_used[key] = self.kv_used.get(key, 0) + sign * b.pages_per_request


def kv_waits(self: ConductorCore) -> str:
    """The pools a queued request waits for, in words."""
    short = [
        f"{_pool_name(b)} ({self.kv_used.get((b.node, b.ranks), 0)} of {b.pages} pages promised)"
        for b in self.spec.kv_budgets
        if self.kv_used.get((b.node, b.ranks), 0) + b.pages_per_request > _capacity(self, b)
    ]
    return "; ".join(short)
