"""`PagedKVPool.truncate` / `ctx.kv.truncate`: rewinding a sequence's tail (speculative
decoding's rejected draft tokens) returns its pages to the pool and to the request's admission
promise, never writes into a page another label shares, and reads back exactly what was kept."""

from __future__ import annotations

import pytest
import torch

from wgc_runtime.engines import PagedKVPool
from wgc_runtime.engines.kv_handle import KvHandle, KvReadOnly


def pool(pages: int = 16) -> PagedKVPool:
    return PagedKVPool(layers=2, kv_heads=2, head_dim=3, pages=pages, page_size=4, labels=None)


def kv(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, tokens, 2, 3, generator=g), torch.randn(2, tokens, 2, 3, generator=g)


def test_a_cut_returns_the_tail_pages_and_keeps_the_head_exactly() -> None:
    p = pool()
    h = KvHandle(p, "r", ("main",), node="LM")
    k, v = kv(10, 0)
    h.append(k, v)
    assert p.pages_of("r") == 3 and p.free_pages == 13
    h.truncate(5)  # 5 tokens: 2 pages of 4
    assert h.length() == 5 and p.pages_of("r") == 2 and p.free_pages == 14
    got_k, got_v = h.keys_values(layer=1)
    assert torch.equal(got_k, k[1, :5]) and torch.equal(got_v, v[1, :5])
    # the accepted tokens append after the kept head
    k2, v2 = kv(3, 1)
    h.append(k2, v2)
    got_k, _ = h.keys_values(layer=0)
    assert torch.equal(got_k, torch.cat([k[0, :5], k2[0]]))
    p.check()
    h.truncate(0)
    assert h.length() == 0 and p.pages_of("r") == 0 and p.free_pages == 16
    p.check()


def test_freed_pages_go_back_to_the_requests_reservation() -> None:
    # admission promised the request its pages: a rewind must not let another request take them
    p = pool(pages=8)
    p.reserve("r", 32)  # all 8 pages
    slots = p.append("r", "main", 12)
    assert slots.numel() == 12 and p.unreserved_pages == 0
    assert p.truncate("r", "main", 4) == 2
    assert p.free_pages == 7 and p.unreserved_pages == 0  # still promised to `r`
    p.append("r", "main", 28)  # grows back to its full promise
    assert p.pages_of("r") == 8
    p.check()
    p.free("r")
    assert p.unreserved_pages == 8


def test_a_cut_into_a_shared_page_copies_it_first() -> None:
    p = pool()
    h = KvHandle(p, "r", ("main", "draft"), node="LM")
    k, v = kv(8, 2)
    h.append(k, v)  # two full pages
    h.fork("main", "draft")  # both pages shared
    shared = p.page_table("r", "main")
    assert p.page_table("r", "draft") == shared
    h.truncate(6, "draft")  # its second page becomes partial: copied, the first stays shared
    draft = p.page_table("r", "draft")
    assert draft[0] == shared[0] and draft[1] != shared[1]
    k2, v2 = kv(2, 3)
    h.append(k2, v2, "draft")  # writes into the copy, never into `main`'s page
    main_k, _ = h.keys_values(label="main")
    draft_k, _ = h.keys_values(label="draft")
    assert torch.equal(main_k, k[0]) and torch.equal(draft_k, torch.cat([k[0, :6], k2[0]]))
    p.check()


def test_bad_cuts_and_read_only_copies_are_refused() -> None:
    p = pool()
    h = KvHandle(p, "r", ("main",), node="LM")
    h.append(*kv(3, 4))
    with pytest.raises(ValueError, match="holds 3"):
        h.truncate(4)
    with pytest.raises(ValueError, match="holds 3"):
        h.truncate(-1)
    h.truncate(3)  # no-op
    assert h.length() == 3
    ro = KvHandle(p, "r", ("main",), node="LM_copy", writable=False)
    with pytest.raises(KvReadOnly, match="cannot truncate"):
        ro.truncate(1)
