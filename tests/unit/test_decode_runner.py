"""`DecodeRunner`: a kv-cache node's running batch gives each step the metadata the pool says
(slots, positions, lengths, page tables padded with the padding page), rows join and leave,
and a full sequence fails its row only."""

from __future__ import annotations

from typing import Any

import pytest
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


def _twin(width: int) -> tuple[PagedKVPool, DecodeRunner]:
    pool = PagedKVPool(layers=1, kv_heads=1, head_dim=2, pages=64, page_size=PS)
    pad = int(pool.append(PAD_REQUEST, "main", 1)[0]) // PS
    return pool, DecodeRunner(pool, label="main", width=width, limit=LIMIT, pad_page=pad)


def _same(a: object, b: object) -> None:
    from wgc_runtime.engines.decode_runner import StepMeta

    assert isinstance(a, StepMeta) and isinstance(b, StepMeta)
    for name in ("positions", "slots", "kv_lens", "block_tables"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tolist() == y.tolist(), name
    assert a.rows == b.rows and a.row_ids.tolist() == b.row_ids.tolist()
    assert {i: str(e) for i, e in a.failed.items()} == {i: str(e) for i, e in b.failed.items()}


@pytest.mark.parametrize("width", [WIDTH, 4])  # rows reach their limit / their width first
def test_the_array_step_equals_the_row_by_row_step(width: int) -> None:
    """A runner stepping its batch as arrays (the pool unchanged since its last step) and one
    whose pool changed before every step (row by row) give the same metadata, pages and
    failures, through page boundaries at staggered lengths, a fork and a cut between steps,
    rows reaching their limit and their width."""
    fast, slow = _twin(width), _twin(width)
    arrays = []
    fast_step = fast[1]._step_fast

    def counted(*args: Any) -> Any:
        meta = fast_step(*args)
        arrays.append(meta is not None)
        return meta

    fast[1]._step_fast = counted  # type: ignore[method-assign]
    for pool, _ in (fast, slow):
        for r, n in (("a", 1), ("b", 6), ("c", 11), ("d", 2)):
            pool.append(r, "main", n)
    batch = ["a", "b", "c", "d"]
    taken = 0
    for step in range(24):
        for pool, runner in (fast, slow):
            if step == 7:  # the pool changes outside the runner: fork into `d`, cut `c`
                pool.fork("a", "main", "other")
                pool.truncate("c", "main", pool.seq_len("c") - 3)
                runner.sync("c")
            if runner is slow[1]:
                pool.changes += 1  # as any outside change: the row-by-row path
        taken_before = fast[0].stats.allocated
        _same(fast[1].step(batch), slow[1].step(batch))
        taken += fast[0].stats.allocated - taken_before
        for r in batch:
            assert fast[0].page_table(r) == slow[0].page_table(r), (step, r)
            assert fast[0].seq_len(r) == slow[0].seq_len(r)
        fast[0].check()
    assert taken > 0 and fast[0].stats == slow[0].stats
    # array steps until the fork, after it until a row fails (full): then row by row
    assert sum(arrays) == (10 if width == WIDTH else 4) and False in arrays
    assert fast[1]._fast is None  # rows failed (full): the last steps went row by row


def test_the_array_step_runs_out_of_pages_as_the_row_by_row_step() -> None:
    """A pool out of pages mid-batch: the rows before the one that could not grow grew, the
    error is the pool's, whichever path stepped."""
    from wgc_runtime.engines.kv_pool import PoolFull

    got = []
    for force in (False, True):
        pool = PagedKVPool(layers=1, kv_heads=1, head_dim=2, pages=6, page_size=PS)
        pad = int(pool.append(PAD_REQUEST, "main", 1)[0]) // PS
        runner = DecodeRunner(pool, label="main", width=WIDTH, limit=LIMIT, pad_page=pad)
        for r in ("a", "b", "c"):
            pool.append(r, "main", 3)
        lengths = []
        for _ in range(4):
            if force:
                pool.changes += 1
            try:
                runner.step(["a", "b", "c"])
            except PoolFull as exc:
                lengths.append(str(exc))
                break
            lengths.append([pool.seq_len(r) for r in "abc"])
        lengths.append([pool.seq_len(r) for r in "abc"])
        got.append(lengths)
        pool.check()
    assert got[0] == got[1] and isinstance(got[0][-2], str), got
