"""The paged KV cache of one `kv_cache` engine: one page pool, page tables per (request, label).

Layout. One tensor ``kv`` of shape ``[layers, pages, 2, page_size, kv_heads, head_dim]`` (index 0
of dim 2 is K, 1 is V). ``pool.layer(i)`` is the ``[pages, 2, page_size, kv_heads, head_dim]``
view of layer ``i``: exactly FlashInfer's NHD paged layout, so every attention backend reads the
pool in place. A *slot* is ``page * page_size + offset``: token ``offset`` of page ``page``.

Labels. A request owns one page table per *label* (a node's declared labels: ``main``,
``cfg_text``, ``cfg_img``, ...). Labels of one request are separate sequences over the SAME pool:
CFG branches are labels, not separate caches. A request's tables live until `free` (request end
or cancel), so the prefill walks, the decode loop and image generation of one flow all reuse it.

Copy-on-branch (`fork`). ``fork(request, "main", "cfg_text")`` makes ``cfg_text`` a snapshot of
``main``. Default (``share=True``): the destination SHARES the source's full pages (their
refcount goes up) and gets a private copy of the partially filled last page, so a fork costs one
page copy plus O(pages) refcount bumps, and CFG branches hold the common prefix once. This is
safe because of one invariant: **a page with refcount > 1 is always full**, and `append` only
ever writes after a table's last token, i.e. into a private partial page or a fresh page; a
shared page is never written again. ``share=False`` copies every page (page-sized copies, one
tensor copy per fork) for callers that want fully disjoint storage. Fork snapshots the slots that
were appended so far: write their K/V (`write_kv`) before forking.

Allocation. Free pages sit on a stack of page ids (a Python list): allocating or freeing a page
is one ``pop``/``append``, so appending n tokens touches O(n / page_size) pages and never scans
the pool. `stats` counts page operations so tests check that cost without timing.

Admission. ``reserve(request, tokens)`` promises a request pages for ``tokens`` tokens (over all
its labels) before it starts; its later appends draw on that reservation first. It raises
`PoolFull` (with the numbers) when the pool cannot promise them, or waits up to ``timeout``
seconds for other requests to free pages. `can_admit` asks without reserving. Appends without a
reservation take unreserved free pages and raise `PoolFull` when none are left.

Thread safety: every public method holds the pool's lock (admission may come from the
conductor's thread while a worker steps the batch).

The pool's storage and allocator live in `kv_pool_base` (`PoolBase`); this module adds the
moves of labels (fork, drop, truncate, export and import) and of whole requests (free,
rename), and re-exports the records and errors.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

from wgc_runtime.engines.kv_pool_base import (
    DTYPES,
    PAD_REQUEST,
    K,
    PageTable,
    PoolBase,
    PoolFull,
    PoolStats,
    PoolTooLarge,
    SequenceFull,
    V,
    device_bytes,
)

__all__ = [
    "DTYPES",
    "PAD_REQUEST",
    "K",
    "PageTable",
    "PagedKVPool",
    "PoolFull",
    "PoolStats",
    "PoolTooLarge",
    "SequenceFull",
    "V",
    "device_bytes",
]


class PagedKVPool(PoolBase):
    """One engine's paged KV cache. See the module docstring for the model."""

    def export_label(self, request: Hashable, label: str) -> torch.Tensor:
        """``label``'s keys and values, every layer: ``[layers, 2, length, kv_heads, head_dim]``
        (a copy, to move or copy a sequence to another pool)."""
        parts = [torch.stack(self.gather(request, label, layer)) for layer in range(self.layers)]
        return torch.stack(parts)

    def import_label(self, request: Hashable, label: str, kv: torch.Tensor) -> None:
        """Make ``label`` hold the sequence `export_label` produced (replacing what it held)."""
        expected = (self.layers, 2, kv.shape[2] if kv.dim() == 5 else -1)
        if (
            kv.dim() != 5
            or tuple(kv.shape[:3]) != expected
            or tuple(kv.shape[3:])
            != (
                self.kv_heads,
                self.head_dim,
            )
        ):
            raise ValueError(
                f"cannot import kv of shape {list(kv.shape)} into a pool of {self.layers} layers, "
                f"{self.kv_heads} kv heads of {self.head_dim}"
            )
        self.drop(request, label)
        slots = self.append(request, label, kv.shape[2])
        self.write(slots, kv[:, K], kv[:, V])

    def fork(
        self, request: Hashable, src_label: str, dst_label: str, *, share: bool = True
    ) -> None:
        """Make ``dst_label`` a snapshot of ``src_label`` (replacing what ``dst_label`` held).

        ``share=True``: full pages are shared (refcounted), the partial last page is copied.
        ``share=False``: every page is copied. The pool's tensor is copied in one indexed copy.
        """
        self._check_label(src_label)
        self._check_label(dst_label)
        if src_label == dst_label:
            return
        with self._cond:
            self.changes += 1
            tables = self._tables.get(request, {})
            src = tables.get(src_label)
            if src is None:
                raise KeyError(f"request `{request}` has no kv label `{src_label}` to fork")
            old = tables.pop(dst_label, None)
            if old is not None:
                self._release(old.pages)
            full = src.length // self.page_size
            keep = full if share else 0
            copy_from = src.pages[keep:]
            fresh = self._take(request, len(copy_from), f"fork `{src_label}` → `{dst_label}`")
            for p in src.pages[:keep]:
                self._refs[p] += 1
            self.stats.shared += keep
            self.stats.copied += len(fresh)
            if fresh:
                dst_idx = torch.tensor(fresh, dtype=torch.long, device=self.device)
                src_idx = torch.tensor(copy_from, dtype=torch.long, device=self.device)
                self.kv[:, dst_idx] = self.kv[:, src_idx]
            tables[dst_label] = PageTable(src.pages[:keep] + fresh, src.length)

    def drop(self, request: Hashable, label: str) -> int:
        """Free one label's pages (e.g. the CFG branches after image generation)."""
        with self._cond:
            self.changes += 1
            table = self._tables.get(request, {}).pop(label, None)
            if table is None:
                return 0
            self._release(table.pages)
            self._cond.notify_all()
            return len(table.pages)

    def truncate(self, request: Hashable, label: str, length: int) -> int:
        """Cut ``label``'s sequence to its first ``length`` tokens (speculative decoding's
        rejected draft tokens): the pages past it go back to the pool, and to ``request``'s
        reservation when it was admitted with one (admission promised them: the request may
        grow back). A page another label still shares stays; a shared page that the cut
        leaves partial is copied first (an append must never write into a shared page).
        The table is a new list (see `append_token`). Returns the pages freed."""
        self._check_label(label)
        with self._cond:
            self.changes += 1
            tables = self._tables.get(request, {})
            table = tables.get(label)
            held = 0 if table is None else table.length
            if not 0 <= length <= held:
                raise ValueError(
                    f"cannot cut `{request}`/`{label}` to {length} tokens: it holds {held}"
                )
            if table is None or length == held:
                return 0
            keep = self.pages_for(length)
            pages, dropped = table.pages[:keep], table.pages[keep:]
            before = len(self._free)
            self._release(dropped)
            freed = len(self._free) - before
            if request in self._reserved and freed:
                self._reserved[request] += freed
                self._reserved_total += freed
            last = pages[-1] if pages else None
            if last is not None and length % self.page_size and self._refs[last] > 1:
                (fresh,) = self._take(request, 1, f"cut `{request}`/`{label}` (a shared page)")
                self.kv[:, fresh] = self.kv[:, last]
                self._refs[last] -= 1
                self.stats.copied += 1
                pages[-1] = fresh
            tables[label] = PageTable(pages, length)
            self._cond.notify_all()
            return freed

    def free(self, request: Hashable) -> int:
        """Return every page of ``request`` (all labels) and its reservation: on end or cancel.
        Returns the number of page references dropped. Freeing an unknown request is a no-op."""
        with self._cond:
            self.changes += 1
            tables = self._tables.pop(request, {})
            n = 0
            for table in tables.values():
                self._release(table.pages)
                n += len(table.pages)
            self._reserved_total -= self._reserved.pop(request, 0)
            self._cond.notify_all()
            return n

    def rename(self, old: Hashable, new: Hashable) -> int:
        """Move ``old``'s tables (every label) to key ``new``, which must hold none: a session
        keeps a request's pages past its end, and its next request takes them back. ``old``'s
        unused reservation is dropped. Returns the pages moved."""
        with self._cond:
            self.changes += 1
            if new in self._tables:
                raise KeyError(f"kv pool already holds pages for `{new}`")
            tables = self._tables.pop(old, {})
            if tables:
                self._tables[new] = tables
            self._reserved_total -= self._reserved.pop(old, 0)
            self._cond.notify_all()
            return sum(len(t.pages) for t in tables.values())
