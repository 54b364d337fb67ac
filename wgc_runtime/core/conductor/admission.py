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

`Admission` owns the admission state: the queue of requests waiting (with their deadlines), the
cap on requests running at once (zero while admission is held), and the pages promised per pool.
"""

from __future__ import annotations

from collections import OrderedDict

from wgc_runtime.contract.conductor import ConductorSpec, KvBudget
from wgc_runtime.contract.flow import Request

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


class Admission:
    """Which requests may start (see the module docstring)."""

    def __init__(self, spec: ConductorSpec, max_concurrent: int) -> None:
        self.budgets = spec.kv_budgets
        kv = spec.kv_cache
        self.capacity = {
            (b.node, b.ranks): b.pages - parked_pages(kv.max_sessions, kv.session_pages, b.pages)
            for b in self.budgets
        }
        self.max_concurrent = max(1, int(max_concurrent))
        self.held_cap = 0  # the cap while admission is held (`hold`)
        self.queue: OrderedDict[str, tuple[Request, float]] = OrderedDict()
        self.kv_used: dict[PoolKey, int] = {}  # pages promised per KV pool

    def hold(self, held: bool) -> bool:
        """Hold admission (no request starts) or release it; True when released (the queue may
        be admitted again)."""
        if held:
            self.held_cap = self.held_cap or self.max_concurrent
            self.max_concurrent = 0
            return False
        if self.held_cap:
            self.max_concurrent, self.held_cap = self.held_cap, 0
            return True
        return False

    def room(self, running: int) -> bool:
        """Whether one more request may start beside ``running`` ones: the cap and the pools."""
        return running < self.max_concurrent and self.fits()

    def never_fits(self, request_id: str) -> str | None:
        """Why the request can never be admitted (a pool smaller than what it needs), or
        None."""
        for b in self.budgets:
            cap = self.capacity[(b.node, b.ranks)]
            if b.pages_per_request > cap:
                kept = "" if cap == b.pages else f" ({b.pages - cap} kept for idle sessions)"
                return (
                    f"request `{request_id}` needs {b.pages_per_request} page(s) of "
                    f"{_pool_name(b)}, which has {cap}{kept}: raise `kv_cache.pages` in the "
                    f"placement, or lower the node's `config kv_tokens`"
                    + (" or `sessions.max_pages`" if kept else "")
                )
        return None

    def fits(self) -> bool:
        """Whether every pool can promise one more request its pages now."""
        return all(
            self.kv_used.get(key := (b.node, b.ranks), 0) + b.pages_per_request
            <= self.capacity[key]
            for b in self.budgets
        )

    def promise(self, sign: int) -> None:
        """Take (``sign`` 1) or give back (-1) one request's pages in every pool."""
        for b in self.budgets:
            key = (b.node, b.ranks)
            self.kv_used[key] = self.kv_used.get(key, 0) + sign * b.pages_per_request

    def kv_waits(self) -> str:
        """The pools a queued request waits for, in words."""
        short = [
            f"{_pool_name(b)} ({self.kv_used.get(key, 0)} of {b.pages} pages promised)"
            for b in self.budgets
            if self.kv_used.get(key := (b.node, b.ranks), 0) + b.pages_per_request
            > self.capacity[key]
        ]
        return "; ".join(short)
