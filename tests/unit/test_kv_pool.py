"""The paged KV pool: slots, labels, copy-on-branch, freeing, admission, allocation cost."""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch

from tests.narrow import present
from wgc_runtime.engines import PagedKVPool, PoolFull
from wgc_runtime.engines.kv_pool import SequenceFull

LABELS = ("main", "cfg_text", "cfg_img")


def small_pool(pages: int = 32, page_size: int = 4, **kw) -> PagedKVPool:
    return PagedKVPool(layers=2, kv_heads=2, head_dim=3, pages=pages, page_size=page_size, **kw)


def write_const(pool: PagedKVPool, slots: torch.Tensor, value: float) -> None:
    """Write ``value`` as K and V of every layer at ``slots``."""
    page, off = slots // pool.page_size, slots % pool.page_size
    pool.kv[:, page, :, off] = value


def test_append_returns_slots_on_the_label_pages():
    pool = small_pool()
    s1 = pool.append("r", "main", 6)
    s2 = pool.append("r", "main", 3)
    pages = pool.page_table("r", "main")
    assert len(pages) == 3 and pool.seq_len("r", "main") == 9
    expect = [pages[p // 4] * 4 + p % 4 for p in range(9)]
    assert torch.cat([s1, s2]).tolist() == expect
    assert s1.dtype == torch.long


def test_append_token_is_one_decode_step_append_with_a_limit():
    pool, twin = small_pool(), small_pool()
    pool.append("r", "main", 3)
    twin.append("r", "main", 3)
    pages = None
    for n in range(4, 10):  # across two page boundaries
        slot, length, pages = pool.append_token("r", "main", limit=9)
        (want,) = twin.append_slots("r", "main", 1)
        assert (slot, length) == (want, n)
        assert pages is pool._tables["r"]["main"].pages  # the table's own list, no copy
        assert pages == pool.page_table("r", "main") == twin.page_table("r", "main")
    with pytest.raises(SequenceFull, match="holds 9 of 9 tokens"):
        pool.append_token("r", "main", limit=9)
    assert pool.seq_len("r", "main") == 9  # refused: nothing grew
    pool.free("r")
    _, _, fresh = pool.append_token("r", "main")
    assert fresh is not pages  # a table made anew is a new list


def test_append_tokens_is_append_token_per_request():
    """A batch's appends under one lock: per request what `append_token` gives, and a full
    sequence's `SequenceFull` in its place while the others grow."""
    pool, twin = small_pool(), small_pool()
    for p in (pool, twin):
        p.append("a", "main", 3)
        p.append("b", "main", 9)
    got = pool.append_tokens(["a", "b", "c"], "main", limit=9)
    assert isinstance(got[1], SequenceFull) and pool.seq_len("b", "main") == 9
    for request, g in zip("ac", (got[0], got[2]), strict=True):
        assert not isinstance(g, SequenceFull)
        slot, length, pages = g
        assert (slot, length) == twin.append_token(request, "main", limit=9)[:2]
        assert pages == pool.page_table(request, "main") == twin.page_table(request, "main")


def test_pool_is_sized_from_the_placement():
    kv = (("page_size", 8), ("pages", 10), ("dtype", "bf16"))
    pool = PagedKVPool.from_placement(kv, layers=3, kv_heads=2, head_dim=4, labels=LABELS)
    assert pool.kv.shape == (3, 10, 2, 8, 2, 4) and pool.kv.dtype == torch.bfloat16
    assert pool.layer(1).shape == (10, 2, 8, 2, 4)
    with pytest.raises(KeyError, match="unknown kv label `other`"):
        pool.append("r", "other", 1)


def test_labels_isolate_their_pages_and_values():
    pool = small_pool(labels=LABELS)
    for value, label in enumerate(LABELS, start=1):
        write_const(pool, pool.append("r", label, 7), float(value))
    tables = [set(pool.page_table("r", label)) for label in LABELS]
    assert not (tables[0] & tables[1]) and not (tables[0] & tables[2])
    for value, label in enumerate(LABELS, start=1):
        k, v = pool.gather("r", label, layer=1)
        assert k.shape == (7, 2, 3)
        assert torch.all(k == value) and torch.all(v == value)


@pytest.mark.parametrize("share", [True, False])
def test_fork_snapshots_then_diverges(share):
    pool = small_pool(labels=LABELS)
    slots = pool.append("r", "main", 10)  # 2 full pages + 2 tokens
    # the advanced-index dims come first in the indexed result: [10, layers, 2, heads, dim]
    pool.kv[:, slots // 4, :, slots % 4] = torch.arange(10.0)[:, None, None, None, None]
    pool.fork("r", "main", "cfg_text", share=share)
    src, dst = pool.page_table("r", "main"), pool.page_table("r", "cfg_text")
    if share:
        assert dst[:2] == src[:2] and all(pool.refcount(p) == 2 for p in src[:2])
        assert dst[2] != src[2] and (pool.stats.shared, pool.stats.copied) == (2, 1)
    else:
        assert not set(src) & set(dst) and (pool.stats.shared, pool.stats.copied) == (0, 3)
    for layer in range(2):
        main, fork = pool.gather("r", "main", layer), pool.gather("r", "cfg_text", layer)
        assert all(torch.equal(a, b) for a, b in zip(main, fork, strict=True))
    # appends after the fork never touch the other label (the partial page is private)
    write_const(pool, pool.append("r", "main", 3), -1.0)
    write_const(pool, pool.append("r", "cfg_text", 3), -2.0)
    k_main, _ = pool.gather("r", "main")
    k_txt, _ = pool.gather("r", "cfg_text")
    assert torch.all(k_main[10:] == -1) and torch.all(k_txt[10:] == -2)
    assert torch.equal(k_main[:10], k_txt[:10])
    pool.check()
    # the fork outlives its source
    pool.drop("r", "main")
    assert torch.equal(pool.gather("r", "cfg_text")[0][:10], k_txt[:10])
    pool.check()
    pool.free("r")
    assert pool.free_pages == pool.num_pages


def test_refork_replaces_the_destination():
    pool = small_pool()
    pool.append("r", "main", 9)
    pool.fork("r", "main", "b")
    pool.append("r", "main", 8)
    pool.fork("r", "main", "b")
    assert pool.seq_len("r", "b") == 17
    pool.check()
    pool.free("r")
    assert pool.free_pages == pool.num_pages


def test_no_leak_after_1000_random_lifetimes():
    rng = random.Random(1234)
    pool = small_pool(pages=64, page_size=4, labels=LABELS)
    live: list[int] = []
    refused = 0
    for rid in range(1000):
        # admission: reserve some requests up front, refuse cleanly when full
        if rng.random() < 0.5:
            try:
                pool.reserve(rid, rng.randint(1, 40))
            except PoolFull:
                refused += 1
        live.append(rid)
        for _ in range(rng.randint(1, 6)):
            r = rng.choice(live)
            op = rng.random()
            try:
                if op < 0.55:
                    pool.append(r, rng.choice(LABELS), rng.randint(1, 9))
                elif op < 0.75 and pool.has(r, "main"):
                    pool.fork(r, "main", rng.choice(LABELS[1:]), share=rng.random() < 0.7)
                elif op < 0.85:
                    pool.drop(r, rng.choice(LABELS))
                else:  # cancel or finish
                    pool.free(r)
                    live.remove(r)
            except PoolFull:
                pool.free(r)  # a request that cannot grow is cancelled
                live.remove(r)
            if not live:
                break
        if rid % 50 == 0:
            pool.check()
        while len(live) > 8:
            pool.free(live.pop(0))
    pool.check()
    for r in live:
        pool.free(r)
    pool.check()
    assert pool.free_pages == pool.num_pages == pool.unreserved_pages
    assert all(pool.refcount(p) == 0 for p in range(pool.num_pages))
    assert pool.stats.allocated == pool.stats.released > 1000
    assert refused > 0  # the run did hit a full pool


class CountingList(list):
    """A free list that counts pops/appends and fails on anything that scans it."""

    def __init__(self, items):
        super().__init__(items)
        self.ops = 0

    def pop(self, *a):
        self.ops += 1
        return super().pop(*a)

    def append(self, x):
        self.ops += 1
        return super().append(x)

    def _scan(self, *a, **k):
        raise AssertionError("the allocator scanned the free list")

    # deliberately not list's signatures: any call at all fails the test
    __iter__ = __contains__ = index = remove = count = sort = _scan  # pyright: ignore[reportAssignmentType]


@pytest.mark.parametrize("pages", [64, 200_000])
def test_allocation_touches_only_the_pages_it_needs(pages):
    pool = PagedKVPool(layers=1, kv_heads=1, head_dim=1, pages=pages, page_size=16)
    pool._free = CountingList(pool._free)
    pool.reserve("a", 40)
    pool.append("a", "main", 40)  # 3 pages
    pool.append("a", "main", 1)
    pool.fork("a", "main", "x")  # shares 2 full pages, copies the partial one
    pool.append("b", "main", 100)  # 7 pages
    assert pool._free.ops == 3 + 1 + 7
    pool.free("a")
    pool.free("b")
    assert pool._free.ops == 2 * (3 + 1 + 7)
    assert pool.stats.allocated == pool.stats.released == 11


def test_admission_refuses_with_numbers():
    pool = small_pool(pages=8, page_size=4)
    assert pool.can_admit(32) and not pool.can_admit(33)
    assert pool.reserve("a", 20) == 5
    assert not pool.can_admit(13)
    with pytest.raises(PoolFull) as err:
        pool.reserve("b", 13)
    assert (err.value.needed, err.value.free, err.value.total) == (4, 3, 8)
    assert "needs 4 page(s) of 4 tokens, 3 of 8 pages are free and unreserved" in str(err.value)
    with pytest.raises(PoolFull, match="needs 9 page"):
        pool.reserve("huge", 33, timeout=None)  # bigger than the pool: never waits
    # reserved pages are not handed to others
    pool.append("c", "main", 12)
    with pytest.raises(PoolFull):
        pool.append("c", "main", 1)
    pool.append("a", "main", 20)  # draws on its reservation
    assert pool.unreserved_pages == 0 and pool.free_pages == 0
    pool.free("a")
    pool.free("c")
    assert pool.unreserved_pages == 8


def test_admission_waits_for_pages():
    pool = small_pool(pages=4, page_size=4)
    pool.append("a", "main", 16)

    def finish():
        time.sleep(0.1)
        pool.free("a")

    t = threading.Thread(target=finish)
    t.start()
    start = time.monotonic()
    assert pool.reserve("b", 8, timeout=5.0) == 2
    t.join()
    assert 0.05 < time.monotonic() - start < 5.0
    with pytest.raises(PoolFull):
        pool.reserve("c", 16, timeout=0.05)


def test_bytes_held_counts_used_pages_only():
    pool = small_pool(pages=10, page_size=4)
    assert pool.bytes_held() == 0
    pool.append("a", "main", 5)
    per_page = 2 * 2 * 4 * 2 * 3 * 4  # layers, K/V, page_size, kv_heads, head_dim, f32
    assert pool.bytes_held() == 2 * per_page


def test_a_pool_larger_than_its_device_is_refused_before_allocating() -> None:
    from wgc_runtime.engines.kv_pool import PoolTooLarge, device_bytes

    with pytest.raises(PoolTooLarge, match=r"lower `kv_cache.pages`") as info:
        PagedKVPool(layers=2, kv_heads=2, head_dim=16, pages=2**62, page_size=16)
    assert "more than the cpu has" in str(info.value)
    # no bound on the meta device (the KV memory tests size real placements there)
    assert device_bytes(torch.device("meta")) is None
    assert present(device_bytes(torch.device("cpu"))) > 2**20
