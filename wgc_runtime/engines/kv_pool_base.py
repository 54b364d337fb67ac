"""The storage and allocator of a paged KV pool (`PoolBase`, completed by
`kv_pool.PagedKVPool`): the pool tensor, page tables, free-page stack, refcounts, reservations,
appends and writes, and the records and errors they use. The model (layout, labels,
copy-on-branch, admission) is described in `wgc_runtime.engines.kv_pool`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import torch

K, V = 0, 1
# the runtime's own sequence in a pool, where padding rows of captured steps write their K/V
# (not a request: its page is the pool's reserve, kept for the pool's life)
PAD_REQUEST = "__wgc_pad__"

DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "fp32": torch.float32,
    "f16": torch.float16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


class PoolTooLarge(ValueError):
    """The pool a placement asks for cannot fit the device it is to live on (checked before
    anything is allocated: a placement's ``kv_cache.pages`` of 2^62 is a message, not an
    overflow inside torch)."""


def device_bytes(device: torch.device) -> int | None:
    """The memory of ``device`` (a GPU's total, the host's physical memory for the CPU); None
    where there is no such bound (``meta``)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1])
    if device.type == "cpu":
        try:
            return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None
    return None


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**60 else f"{n:.3g} bytes"


class SequenceFull(ValueError):
    """`PagedKVPool.append_token` with a ``limit`` the sequence already reached."""


class PoolFull(RuntimeError):
    """The pool cannot hold what was asked: ``needed`` pages, ``free`` unreserved free pages."""

    def __init__(self, what: str, *, needed: int, free: int, total: int, page_size: int):
        self.needed, self.free, self.total, self.page_size = needed, free, total, page_size
        super().__init__(
            f"kv pool full: {what} needs {needed} page(s) of {page_size} tokens, "
            f"{free} of {total} pages are free and unreserved"
        )


@dataclass(slots=True)
class PageTable:
    """One label's sequence: its pages in order and how many tokens it holds."""

    pages: list[int] = field(default_factory=list)
    length: int = 0


@dataclass(slots=True)
class PoolStats:
    """Operation counters: allocation cost is checked by counting, not timing."""

    allocated: int = 0  # pages popped from the free stack
    released: int = 0  # pages pushed back
    shared: int = 0  # refcount bumps by fork(share=True)
    copied: int = 0  # pages copied (fork)


class PoolBase:
    """A paged KV pool's storage and allocation (`kv_pool.PagedKVPool` adds the label moves)."""

    def __init__(
        self,
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        pages: int,
        page_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        labels: Iterable[str] | None = None,
    ):
        if min(layers, kv_heads, head_dim, pages, page_size) < 1:
            raise ValueError("kv pool sizes must be positive")
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.num_pages, self.page_size = pages, page_size
        self.dtype, self.device = dtype, torch.device(device)
        need = layers * pages * 2 * page_size * kv_heads * head_dim * dtype.itemsize
        have = device_bytes(self.device)
        if have is not None and need > have:
            raise PoolTooLarge(
                f"the KV pool needs {_gib(need)} ({pages:,} pages of {page_size} tokens x "
                f"{layers} layers x 2 x {kv_heads} kv heads x {head_dim} x {dtype.itemsize} bytes)"
                f", more than the {self.device} has ({_gib(have)}): lower `kv_cache.pages` in "
                "the placement"
            )
        # None: any label is accepted (a bare pool in tests); else only the node's declared ones
        self.labels: frozenset[str] | None = None if labels is None else frozenset(labels)
        self.kv = torch.zeros(
            (layers, pages, 2, page_size, kv_heads, head_dim), dtype=dtype, device=self.device
        )
        self._free: list[int] = list(range(pages - 1, -1, -1))  # pop() hands out page 0 first
        self._refs: list[int] = [0] * pages
        self._tables: dict[Hashable, dict[str, PageTable]] = {}
        self._reserved: dict[Hashable, int] = {}  # request -> pages still promised to it
        self._reserved_total = 0
        self._cond = threading.Condition(threading.RLock())
        self.stats = PoolStats()
        # bumped by every change of a table but a `DecodeRunner`'s own steps (its cache's key)
        self.changes = 0

    @classmethod
    def from_placement(
        cls,
        kv_cache: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        device: str | torch.device = "cpu",
        labels: Iterable[str] | None = None,
    ) -> Self:
        """A pool sized from a placement's ``kv_cache`` (``page_size``, ``pages``, ``dtype``), as
        the plan's ``kv_cache`` pairs or a mapping."""
        kv = dict(kv_cache)
        dtype = str(kv.get("dtype", "f32"))
        if dtype not in DTYPES:
            raise ValueError(f"unsupported kv_cache dtype `{dtype}` (one of {sorted(DTYPES)})")
        return cls(
            layers=layers,
            kv_heads=kv_heads,
            head_dim=head_dim,
            pages=int(kv.get("pages", 1024)),
            page_size=int(kv.get("page_size", 16)),
            dtype=DTYPES[dtype],
            device=device,
            labels=labels,
        )

    # ------------------------------------------------------------------ queries

    def layer(self, index: int) -> torch.Tensor:
        """Layer ``index``'s ``[pages, 2, page_size, kv_heads, head_dim]`` view (no copy)."""
        return self.kv[index]

    def pages_for(self, tokens: int) -> int:
        return -(-max(tokens, 0) // self.page_size)

    @property
    def free_pages(self) -> int:
        """Pages on the free stack (some may be promised to reservations)."""
        return len(self._free)

    @property
    def unreserved_pages(self) -> int:
        return len(self._free) - self._reserved_total

    @property
    def used_pages(self) -> int:
        return self.num_pages - len(self._free)

    def requests(self) -> list[Hashable]:
        with self._cond:
            return list(self._tables.keys() | self._reserved.keys())

    def pages_of(self, request: Hashable) -> int:
        """Distinct pages ``request``'s sequences reference (pages shared by forks count once)."""
        tables = self._tables.get(request, {})
        return len({p for t in tables.values() for p in t.pages})

    def has(self, request: Hashable, label: str = "main") -> bool:
        return label in self._tables.get(request, {})

    def seq_len(self, request: Hashable, label: str = "main") -> int:
        """Tokens in ``label``'s sequence of ``request`` (0 when it has none yet)."""
        table = self._tables.get(request, {}).get(label)
        return 0 if table is None else table.length

    def page_table(self, request: Hashable, label: str = "main") -> list[int]:
        """A copy of ``label``'s page ids, in sequence order."""
        table = self._tables.get(request, {}).get(label)
        return [] if table is None else list(table.pages)

    def refcount(self, page: int) -> int:
        return self._refs[page]

    def bytes_held(self) -> int:
        """Bytes of the pages in use (what the requests hold, not the whole pool)."""
        per_page = self.kv[:, 0].numel() * self.kv.element_size()
        return self.used_pages * per_page

    def gather(self, request: Hashable, label: str = "main", layer: int = 0):
        """``(K, V)`` of ``label``'s sequence in ``layer``, each ``[len, kv_heads, head_dim]``
        (a copy; for tests and debugging, backends read the pool in place)."""
        table = self._tables.get(request, {}).get(label, PageTable())
        idx = torch.tensor(table.pages, dtype=torch.long, device=self.device)
        kv = self.kv[layer].index_select(0, idx)  # [n, 2, ps, h, d]
        k = kv[:, K].reshape(-1, self.kv_heads, self.head_dim)[: table.length]
        v = kv[:, V].reshape(-1, self.kv_heads, self.head_dim)[: table.length]
        return k, v

    # ------------------------------------------------------------------ admission

    def can_admit(self, tokens: int) -> bool:
        """Whether a new request of ``tokens`` tokens (all labels) could be reserved now."""
        with self._cond:
            return self.pages_for(tokens) <= self.unreserved_pages

    def reserve(self, request: Hashable, tokens: int, *, timeout: float | None = 0.0) -> int:
        """Promise ``request`` pages for ``tokens`` more tokens (over all its labels).

        ``timeout``: 0 refuses at once, ``None`` waits for as long as it takes, else seconds to
        wait for other requests to free pages. Raises `PoolFull` when it cannot; a request larger
        than the whole pool is refused at once. Returns the pages reserved.
        """
        need = self.pages_for(tokens)
        with self._cond:
            if need > self.num_pages:
                raise self._full(f"request `{request}` ({tokens} tokens)", need)
            deadline = None if timeout is None else time.monotonic() + timeout
            while need > self.unreserved_pages:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise self._full(f"request `{request}` ({tokens} tokens)", need)
                self._cond.wait(left)
            self._reserved[request] = self._reserved.get(request, 0) + need
            self._reserved_total += need
            return need

    def _full(self, what: str, need: int) -> PoolFull:
        return PoolFull(
            what,
            needed=need,
            free=self.unreserved_pages,
            total=self.num_pages,
            page_size=self.page_size,
        )

    # ------------------------------------------------------------------ allocation

    def _check_label(self, label: str) -> None:
        if self.labels is not None and label not in self.labels:
            raise KeyError(f"unknown kv label `{label}` (declared: {sorted(self.labels)})")

    def _take(self, request: Hashable, n: int, what: str) -> list[int]:
        """Pop ``n`` pages for ``request``: from its reservation first, then unreserved ones."""
        if n == 0:
            return []
        mine = self._reserved.get(request, 0)
        from_reservation = min(mine, n)
        if n - from_reservation > self.unreserved_pages:
            raise self._full(what, n - from_reservation)
        if from_reservation:
            self._reserved[request] = mine - from_reservation
            self._reserved_total -= from_reservation
        pages = [self._free.pop() for _ in range(n)]
        for p in pages:
            self._refs[p] = 1
        self.stats.allocated += n
        return pages

    def _release(self, pages: Iterable[int]) -> None:
        for p in pages:
            self._refs[p] -= 1
            if self._refs[p] == 0:
                self._free.append(p)
                self.stats.released += 1

    def append(self, request: Hashable, label: str, n_tokens: int) -> torch.Tensor:
        """Extend ``label``'s sequence by ``n_tokens`` slots; returns their slot mapping (int64,
        on the pool's device) for `AttentionBackend.write_kv`. Allocates pages as needed."""
        if n_tokens <= 16:  # a decode step: the slots as ints are cheaper than tensor ops
            slots = self.append_slots(request, label, n_tokens)
            return torch.tensor(slots, dtype=torch.long, device=self.device)
        start = self._grow(request, label, n_tokens)
        table = self._tables[request][label]
        ps = self.page_size
        first = start // ps
        touched = torch.tensor(table.pages[first : self.pages_for(table.length)], dtype=torch.long)
        pos = torch.arange(start, table.length, dtype=torch.long)
        slots = touched[pos // ps - first] * ps + pos % ps
        return slots.to(self.device)

    def append_slots(self, request: Hashable, label: str, n_tokens: int) -> list[int]:
        """`append`, with the slots as a list of ints (for a caller that batches them)."""
        start = self._grow(request, label, n_tokens)
        pages, ps = self._tables[request][label].pages, self.page_size
        return [pages[p // ps] * ps + p % ps for p in range(start, start + n_tokens)]

    def append_token(
        self, request: Hashable, label: str, limit: int | None = None
    ) -> tuple[int, int, list[int]]:
        """One decode step's append, in one call: ``label``'s sequence grows by one token;
        returns ``(slot, new length, its page ids)``: the table's own list, not a copy (read
        it, never change it; a table only ever grows in place, and a table made anew is a new
        list, so a caller may keep what it derived from the list while it is the same object
        of the same length). With ``limit``, a sequence already holding ``limit`` tokens is not
        grown: `SequenceFull` (a `ValueError`) instead."""
        got = self.append_tokens((request,), label, limit)[0]
        if isinstance(got, SequenceFull):
            raise got
        return got

    def append_tokens(
        self, requests: Sequence[Hashable], label: str, limit: int | None = None
    ) -> list[tuple[int, int, list[int]] | SequenceFull]:
        """`append_token` for each of ``requests`` under one lock (a decode batch's appends):
        per request its ``(slot, new length, page ids)``, or the `SequenceFull` a full
        sequence gives (it does not grow; the others do)."""
        self._check_label(label)
        out: list[tuple[int, int, list[int]] | SequenceFull] = []
        ps, tables = self.page_size, self._tables
        with self._cond:
            self.changes += 1
            for request in requests:
                table = tables.setdefault(request, {}).setdefault(label, PageTable())
                start = table.length
                if limit is not None and start >= limit:
                    out.append(
                        SequenceFull(f"`{request}`/`{label}` holds {start} of {limit} tokens")
                    )
                    continue
                pages = table.pages
                if start >= len(pages) * ps:  # the last page is full (or there is none)
                    pages += self._take(request, 1, f"`{request}`/`{label}` (+1 tokens)")
                table.length = start + 1
                out.append((pages[start // ps] * ps + start % ps, start + 1, pages))
        return out

    def _grow(self, request: Hashable, label: str, n_tokens: int) -> int:
        """Lengthen the sequence by ``n_tokens`` (pages allocated as needed); its old length."""
        self._check_label(label)
        if n_tokens < 0:
            raise ValueError(f"cannot append {n_tokens} tokens")
        with self._cond:
            self.changes += 1
            table = self._tables.setdefault(request, {}).setdefault(label, PageTable())
            start, end = table.length, table.length + n_tokens
            grow = self.pages_for(end) - len(table.pages)
            if grow > 0:  # most decode steps fill the last page and take none
                what = f"`{request}`/`{label}` (+{n_tokens} tokens)"
                table.pages += self._take(request, grow, what)
            table.length = end
            return start

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store keys and values ``[layers, n, kv_heads, head_dim]`` at ``slots`` (``[n]``,
        from `append`), every layer."""
        page = torch.div(slots, self.page_size, rounding_mode="floor")
        offset = slots - page * self.page_size
        for layer in range(self.layers):
            self.kv[layer, page, K, offset] = k[layer].to(self.dtype)
            self.kv[layer, page, V, offset] = v[layer].to(self.dtype)

    def check(self) -> None:
        """Assert the allocator's invariants (tests): refcounts match the tables, free pages
        have refcount 0, shared pages are full."""
        with self._cond:
            refs = [0] * self.num_pages
            for tables in self._tables.values():
                for t in tables.values():
                    assert len(t.pages) == self.pages_for(t.length), "table size"
                    for i, p in enumerate(t.pages):
                        refs[p] += 1
                        if self._refs[p] > 1:
                            assert (i + 1) * self.page_size <= t.length, "shared partial page"
            assert refs == self._refs, "refcounts"
            assert len(set(self._free)) == len(self._free), "free list duplicates"
            assert all(refs[p] == 0 for p in self._free), "free page in use"
            assert len(self._free) + sum(r > 0 for r in refs) == self.num_pages, "leaked pages"
            assert 0 <= self._reserved_total == sum(self._reserved.values()), "reservations"
