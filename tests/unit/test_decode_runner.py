"""`DecodeRunner`: a kv-cache node's running batch gives each step the metadata the pool says
(slots, positions, lengths, page tables padded with the padding page), rows join and leave,
and a full sequence fails its row only."""

from __future__ import annotations

import torch

from wgc_runtime.engines.decode_runner import DecodeRunner
from wgc_runtime.engines.kv_pool import PAD_REQUEST, PagedKVPool, SequenceFull

PS, WIDTH, LIMIT = 4, 6, 20


def _setup() -> tuple[PagedKVPool, DecodeRunner, int]:
    pool = PagedKVPool(layers=1, kv_heads=1, head_dim=2, pages=64, page_size=PS)
    pad = int(pool.append(PAD_REQUEST, "main", 1)[0]) // PS
    return pool, DecodeRunner(pool, label="main", width=WIDTH, limit=LIMIT, pad_page=pad), pad


def _want(pool: PagedKVPool, request: str, pad: int) -> tuple[int, int, list[int]]:
    """What the pool says of the request's last token: (slot, length, padded table)."""
    n = pool.seq_len(request)
    table = pool.page_table(request)
    slot = table[(n - 1) // PS] * PS + (n - 1) % PS
    return slot, n, table + [pad] * (WIDTH - len(table))


def _check(pool: PagedKVPool, runner: DecodeRunner, requests: list[str], pad: int) -> None:
    meta = runner.step(requests)
    assert meta.failed == {} and meta.rows == list(range(len(requests)))
    for i, r in enumerate(requests):
        slot, n, table = _want(pool, r, pad)
        assert int(meta.slots[i]) == slot
        assert int(meta.kv_lens[i]) == n and int(meta.positions[i]) == n - 1
        assert meta.block_tables[i].tolist() == table
    assert meta.kv_lens.dtype == torch.int32 and meta.block_tables.dtype == torch.int32


def test_each_step_is_what_the_pool_holds_across_pages_joins_and_leaves() -> None:
    pool, runner, pad = _setup()
    for r, n in (("a", 3), ("b", 4), ("c", 1)):  # prefills of several lengths
        pool.append(r, "main", n)
    batch = ["a", "b", "c"]
    for step in range(12):
        if step == 5:  # a request leaves, another joins, the order changes
            runner.leave("b")
            pool.free("b")
            pool.append("d", "main", 6)
            batch = ["d", "c", "a"]
        _check(pool, runner, batch, pad)
    assert len(runner) == 3 and "b" not in runner and "d" in runner


def test_a_left_row_is_reused_clean() -> None:
    pool, runner, pad = _setup()
    pool.append("a", "main", 15)
    for _ in range(2):
        _check(pool, runner, ["a"], pad)
    runner.leave("a")
    pool.free("a")
    pool.append("e", "main", 1)
    _check(pool, runner, ["e"], pad)  # the row "a" had: its old pages are gone


def test_a_full_sequence_fails_alone() -> None:
    pool, runner, pad = _setup()
    pool.append("full", "main", LIMIT)
    pool.append("ok", "main", 2)
    meta = runner.step(["full", "ok"])
    assert list(meta.failed) == [0] and isinstance(meta.failed[0], SequenceFull)
    assert meta.rows == [1] and meta.slots.shape == (1,) and meta.block_tables.shape == (1, WIDTH)
    slot, _, table = _want(pool, "ok", pad)
    assert int(meta.slots[0]) == slot and meta.block_tables[0].tolist() == table
    assert pool.seq_len("full") == LIMIT  # not grown


def test_longest_decides_the_form_and_sync_sees_outside_growth() -> None:
    pool, runner, pad = _setup()
    pool.append("a", "main", 3)
    pool.append("b", "main", 9)
    assert runner.longest(["a", "b"]) == 9
    runner.step(["a", "b"])
    assert runner.longest(["a"]) == 4 and runner.longest(["b", "a"]) == 10
    pool.append("a", "main", 5)  # a plain forward of the node grew it
    runner.sync("a")
    assert runner.longest(["a"]) == 9
    _check(pool, runner, ["a", "b"], pad)


def test_tensors_cut_the_tables_to_a_form_width() -> None:
    pool, runner, _ = _setup()
    pool.append("a", "main", 2)
    extra = runner.step(["a"]).tensors(2)
    assert set(extra) == {"positions", "slots", "kv_lens", "block_tables"}
    assert extra["block_tables"].shape == (1, 2)
