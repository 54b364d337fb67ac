"""`KvHandle` (the node API's ``ctx.kv``) and `KvPools` (a rank's pools) on the CPU.

What a kv-cache node's call can do through its handle, checked against hand-written math:
append (and its shape errors), causal and non-causal attention equal to
softmax(QK^T / sqrt(d)) V over the appended keys and values (grouped-query heads too), an empty
sequence attending to zeros, fork (copy on branch: full pages shared, then the branches
diverge), drop, the read-only handle of a ``like X { label L }`` copy, unknown labels; and what
the runtime does with a rank's pools: export / import (a handoff) and export_label /
import_label (a label copy) keep keys and values bit for bit, `free` gives every page back, and
the allocator's invariants (`check`) hold after every step.
"""

from __future__ import annotations

import math

import pytest
import torch

from wgc_runtime.contract.spec import KvPoolSpec
from wgc_runtime.engines.kv_handle import KvHandle, KvReadOnly
from wgc_runtime.engines.kv_pool import PagedKVPool
from wgc_runtime.engines.kv_pools import KvPools

LAYERS, KV_HEADS, HEAD_DIM, PAGE = 2, 2, 4, 4


def make_pool(pages: int = 16, labels=("main", "cfg")) -> PagedKVPool:
    return PagedKVPool(
        layers=LAYERS,
        kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        pages=pages,
        page_size=PAGE,
        labels=labels,
    )


def make_handle(pool: PagedKVPool | None = None, request: str = "r") -> KvHandle:
    pool = pool if pool is not None else make_pool()
    return KvHandle(pool, request, ("main", "cfg"), node="LLM")


def random_kv(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (LAYERS, tokens, KV_HEADS, HEAD_DIM)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def random_q(tokens: int, heads: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((tokens, heads, HEAD_DIM), generator=g)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v, one query and head at a time. ``k``, ``v``: [len, kv_heads,
    d]; query head h reads kv head h // (heads / kv_heads); a causal query t is the sequence's
    position len - tokens + t and sees positions up to it."""
    tokens, heads, dim = q.shape
    length, kv_heads = k.shape[0], k.shape[1]
    group = heads // kv_heads
    out = torch.empty_like(q)
    for t in range(tokens):
        seen = length - tokens + t + 1 if causal else length
        for h in range(heads):
            scores = (k[:seen, h // group] @ q[t, h]) / math.sqrt(dim)
            out[t, h] = torch.softmax(scores, 0) @ v[:seen, h // group]
    return out


# ---------------------------------------------------------------------------------- append
@pytest.mark.parametrize(
    ("k_shape", "v_shape"),
    [
        ((LAYERS + 1, 3, KV_HEADS, HEAD_DIM), None),  # wrong layer count
        ((LAYERS, 3, KV_HEADS + 1, HEAD_DIM), None),  # wrong kv heads
        ((LAYERS, 3, KV_HEADS, HEAD_DIM + 1), None),  # wrong head dim
        ((3, KV_HEADS, HEAD_DIM), None),  # no layer dim
        ((LAYERS, 3, KV_HEADS, HEAD_DIM), (LAYERS, 2, KV_HEADS, HEAD_DIM)),  # k and v differ
    ],
)
def test_append_refuses_a_wrong_shape_and_names_the_expected_one(k_shape, v_shape) -> None:
    h = make_handle()
    k = torch.zeros(k_shape)
    v = torch.zeros(v_shape if v_shape is not None else k_shape)
    with pytest.raises(ValueError) as err:
        h.append(k, v)
    message = str(err.value)
    assert f"[layers={LAYERS}, tokens, kv_heads={KV_HEADS}, head_dim={HEAD_DIM}]" in message
    assert f"got k {list(k_shape)}" in message
    assert h.length() == 0 and h.pool.used_pages == 0, "a refused append allocated pages"


def test_appends_grow_the_sequence_across_pages_and_read_back_exactly() -> None:
    h = make_handle()
    k1, v1 = random_kv(3, seed=1)
    k2, v2 = random_kv(6, seed=2)
    h.append(k1, v1)
    h.append(k2, v2)
    assert h.length() == 9 and h.length("cfg") == 0
    assert h.pool.used_pages == 3  # 9 tokens in pages of 4
    for layer in range(LAYERS):
        k, v = h.keys_values(layer)
        assert torch.equal(k, torch.cat([k1[layer], k2[layer]]))
        assert torch.equal(v, torch.cat([v1[layer], v2[layer]]))
    h.pool.check()


# ---------------------------------------------------------------------------------- attend
@pytest.mark.parametrize("heads", [KV_HEADS, 2 * KV_HEADS, 4 * KV_HEADS], ids=lambda n: f"h{n}")
@pytest.mark.parametrize("tokens", [1, 4, 7], ids=lambda n: f"q{n}")
@pytest.mark.parametrize("layer", range(LAYERS), ids=lambda n: f"layer{n}")
def test_causal_attend_is_softmax_attention_over_the_appended_kv(heads, tokens, layer) -> None:
    h = make_handle()
    k1, v1 = random_kv(5, seed=3)  # two appends: the last page is partial
    k2, v2 = random_kv(6, seed=4)
    h.append(k1, v1)
    h.append(k2, v2)
    q = random_q(tokens, heads, seed=5)
    k, v = torch.cat([k1, k2], 1)[layer], torch.cat([v1, v2], 1)[layer]
    got = h.attend(q, layer)
    assert got.shape == q.shape
    torch.testing.assert_close(got, reference_attention(q, k, v, causal=True))


@pytest.mark.parametrize("heads", [KV_HEADS, 2 * KV_HEADS], ids=lambda n: f"h{n}")
@pytest.mark.parametrize("tokens", [1, 3, 16], ids=lambda n: f"q{n}")  # more queries than keys
def test_non_causal_attend_reads_every_position(heads, tokens) -> None:
    h = make_handle()
    k, v = random_kv(9, seed=6)
    h.append(k, v, "cfg")
    q = random_q(tokens, heads, seed=7)
    got = h.attend(q, 1, "cfg", causal=False)
    torch.testing.assert_close(got, reference_attention(q, k[1], v[1], causal=False))


def test_causal_attend_differs_from_non_causal_over_the_same_sequence() -> None:
    h = make_handle()
    h.append(*random_kv(6, seed=8))
    q = random_q(3, KV_HEADS, seed=9)
    assert not torch.allclose(h.attend(q), h.attend(q, causal=False))


@pytest.mark.parametrize("causal", [True, False])
def test_an_empty_sequence_attends_to_zeros(causal) -> None:
    h = make_handle()
    h.append(*random_kv(2, seed=10), "main")  # another label has tokens; `cfg` has none
    q = random_q(3, 2 * KV_HEADS, seed=11)
    out = h.attend(q, label="cfg", causal=causal)
    assert out.shape == q.shape and torch.equal(out, torch.zeros_like(q))


def test_more_causal_queries_than_tokens_is_an_error() -> None:
    h = make_handle()
    h.append(*random_kv(2, seed=12))
    with pytest.raises(ValueError, match="3 causal queries over a sequence of 2 tokens"):
        h.attend(random_q(3, KV_HEADS, seed=13))


# ---------------------------------------------------------------------------------- fork, drop
def test_fork_shares_full_pages_then_the_branches_diverge() -> None:
    h = make_handle()
    k0, v0 = random_kv(6, seed=14)  # one full page and a partial one
    h.append(k0, v0)
    pool = h.pool
    main_pages = pool.page_table("r", "main")
    h.fork("main", "cfg")
    cfg_pages = pool.page_table("r", "cfg")
    assert cfg_pages[0] == main_pages[0] and pool.refcount(main_pages[0]) == 2  # shared
    assert cfg_pages[1] != main_pages[1]  # the partial page is copied
    assert pool.used_pages == 3
    pool.check()

    k1, v1 = random_kv(3, seed=15)
    k2, v2 = random_kv(5, seed=16)
    h.append(k1, v1, "main")
    h.append(k2, v2, "cfg")
    assert (h.length("main"), h.length("cfg")) == (9, 11)
    for layer in range(LAYERS):
        km, vm = h.keys_values(layer, "main")
        kc, vc = h.keys_values(layer, "cfg")
        assert torch.equal(km, torch.cat([k0[layer], k1[layer]]))
        assert torch.equal(vm, torch.cat([v0[layer], v1[layer]]))
        assert torch.equal(kc, torch.cat([k0[layer], k2[layer]]))
        assert torch.equal(vc, torch.cat([v0[layer], v2[layer]]))
    pool.check()


def test_drop_frees_one_label_and_keeps_the_others() -> None:
    h = make_handle()
    h.append(*random_kv(8, seed=17))
    h.fork("main", "cfg")  # both full pages shared
    assert h.pool.used_pages == 2
    h.append(*random_kv(1, seed=18), "cfg")
    assert h.pool.used_pages == 3
    h.drop("cfg")
    assert h.length("cfg") == 0 and h.length("main") == 8
    assert h.pool.used_pages == 2 and all(h.pool.refcount(p) == 1 for p in h.pool.page_table("r"))
    h.pool.check()


# ---------------------------------------------------------------------------------- labels
def test_an_unknown_label_names_the_node_and_its_labels() -> None:
    h = make_handle()
    expected = "node `LLM` has no kv label `cfg_img` (its labels: main, cfg)"
    for use in (
        lambda: h.length("cfg_img"),
        lambda: h.keys_values(0, "cfg_img"),
        lambda: h.attend(random_q(1, KV_HEADS, 0), label="cfg_img"),
        lambda: h.append(*random_kv(1, 0), "cfg_img"),
        lambda: h.fork("main", "cfg_img"),
        lambda: h.drop("cfg_img"),
    ):
        with pytest.raises(KeyError) as err:
            use()
        assert err.value.args[0] == expected


# ---------------------------------------------------------------------------------- pools
def spec(owner: str, labels: tuple[str, ...], *, shared: bool = False, pages: int = 16):
    return KvPoolSpec(
        owner=owner,
        labels=labels,
        layers=LAYERS,
        kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        page_size=PAGE,
        pages=pages,
        dtype="f32",
        tokens_per_request=8 * len(labels),
        shared=shared,
    )


def rank_pools(**extra: KvPoolSpec) -> KvPools:
    """LLM (labels main, cfg) with its extra nodes (copies)."""
    return KvPools({"LLM": spec("LLM", ("main", "cfg")), **extra})


def test_a_copy_on_its_owners_group_reads_the_owners_pool_and_cannot_write() -> None:
    pools = rank_pools(LLM_cfg=spec("LLM", ("cfg",), shared=True))
    assert list(pools.pools) == ["LLM"]  # the shared copy has no pool of its own
    owner = pools.handle("LLM", "r")
    k, v = random_kv(5, seed=19)
    owner.append(k, v, "cfg")
    copy = pools.handle("LLM_cfg", "r")
    assert not copy.writable and copy.labels == ("cfg",)
    assert copy.length() == 5  # its label by default: the owner's `cfg`
    assert torch.equal(copy.keys_values(1)[0], k[1])
    q = random_q(2, KV_HEADS, seed=20)
    assert torch.equal(copy.attend(q), owner.attend(q, label="cfg"))
    for what, use in (
        ("append", lambda: copy.append(k, v)),
        ("fork", lambda: copy.fork("cfg", "cfg")),
        ("drop", lambda: copy.drop("cfg")),
    ):
        with pytest.raises(KvReadOnly) as err:
            use()
        assert str(err.value) == (
            f"node `LLM_cfg` reads kv label `cfg` of another node's cache: it cannot {what}"
        )
    assert copy.length() == 5 and pools.used_pages() == {"LLM": 2}
    pools.check()


def test_a_copy_cannot_read_its_owners_other_labels() -> None:
    pools = rank_pools(LLM_cfg=spec("LLM", ("cfg",), shared=True))
    pools.handle("LLM", "r").append(*random_kv(2, seed=21), "main")
    with pytest.raises(KeyError, match="node `LLM_cfg` has no kv label `main`"):
        pools.handle("LLM_cfg", "r").keys_values(0, "main")


def test_export_then_import_moves_every_label_bit_for_bit() -> None:
    old, new = rank_pools(), rank_pools()
    h = old.handle("LLM", "r")
    h.append(*random_kv(6, seed=22))
    h.fork("main", "cfg")
    h.append(*random_kv(3, seed=23), "cfg")
    before = {
        (label, layer): h.keys_values(layer, label)
        for label in ("main", "cfg")
        for layer in range(LAYERS)
    }
    parts = old.export("LLM", "r")
    assert sorted(parts) == ["kv:cfg", "kv:main"]
    assert parts["kv:main"].shape == (LAYERS, 2, 6, KV_HEADS, HEAD_DIM)
    assert old.used_pages() == {"LLM": 0}, "the state moves: the old group frees it"
    new.import_("LLM", "r", parts)
    moved = new.handle("LLM", "r")
    for (label, layer), (k, v) in before.items():
        k2, v2 = moved.keys_values(layer, label)
        assert torch.equal(k2, k) and torch.equal(v2, v), (label, layer)
    old.check()
    new.check()


def test_export_label_copies_one_label_into_a_copy_pool_and_keeps_the_source() -> None:
    here = rank_pools()
    there = KvPools({"LLM_cfg": spec("LLM", ("cfg",))})  # a copy on another group: own pool
    assert list(there.pools) == ["LLM_cfg"]
    h = here.handle("LLM", "r")
    k, v = random_kv(7, seed=24)
    h.append(k, v, "cfg")
    h.append(*random_kv(2, seed=25), "main")
    kv = here.export_label("LLM", "r", "cfg")
    assert kv.shape == (LAYERS, 2, 7, KV_HEADS, HEAD_DIM)
    there.import_label("LLM_cfg", "r", "cfg", kv)
    copy = there.handle("LLM_cfg", "r")
    assert not copy.writable and copy.length() == 7
    for layer in range(LAYERS):
        assert torch.equal(copy.keys_values(layer)[0], k[layer])
        assert torch.equal(copy.keys_values(layer)[1], v[layer])
    assert h.length("cfg") == 7 and here.used_pages() == {"LLM": 3}  # the source keeps it
    # the next walk's copy replaces the label (its pages do not pile up)
    there.import_label("LLM_cfg", "r", "cfg", here.export_label("LLM", "r", "cfg"))
    assert there.used_pages() == {"LLM_cfg": 2}
    here.check()
    there.check()


def test_import_label_refuses_a_cache_of_another_shape() -> None:
    there = KvPools({"LLM_cfg": spec("LLM", ("cfg",))})
    wrong = torch.zeros(LAYERS, 2, 3, KV_HEADS + 1, HEAD_DIM)
    with pytest.raises(ValueError, match="cannot import kv of shape"):
        there.import_label("LLM_cfg", "r", "cfg", wrong)
    assert there.used_pages() == {"LLM_cfg": 0}


def test_free_returns_every_page_of_the_request_and_only_its_pages() -> None:
    pools = rank_pools(LLM_cfg_far=spec("LLM", ("cfg",)))
    for rid, seed in (("a", 26), ("b", 27)):
        h = pools.handle("LLM", rid)
        h.append(*random_kv(6, seed=seed))
        h.fork("main", "cfg")
        pools.import_label("LLM_cfg_far", rid, "cfg", pools.export_label("LLM", rid, "cfg"))
    assert pools.used_pages() == {"LLM": 6, "LLM_cfg_far": 4}
    assert pools.free("a") == 4 + 2  # page references: main 2, cfg 2 (one shared), copy 2
    assert pools.used_pages() == {"LLM": 3, "LLM_cfg_far": 2}
    pools.check()
    assert pools.handle("LLM", "b").length("cfg") == 6
    assert pools.free("a") == 0  # freeing twice is harmless
    pools.free("b")
    assert pools.used_pages() == {"LLM": 0, "LLM_cfg_far": 0}
    pools.check()


def test_a_full_pool_refuses_an_append_without_taking_pages() -> None:
    pools = KvPools({"LLM": spec("LLM", ("main", "cfg"), pages=2)})
    h = pools.handle("LLM", "r")
    h.append(*random_kv(5, seed=28))
    with pytest.raises(RuntimeError, match="kv pool full"):
        h.append(*random_kv(4, seed=29))
    assert h.length() == 5 and pools.used_pages() == {"LLM": 2}
    pools.check()
    pools.free("r")
    assert pools.used_pages() == {"LLM": 0}
