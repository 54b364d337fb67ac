"""The shared-memory arena: allocation, refcounts, zero-copy views, no leaks."""

from __future__ import annotations

import contextlib
import gc
import random

import pytest
import torch

from wgc_runtime.host.transport.arena import Allocator, Arena, ArenaFull, leaked_segments


@pytest.fixture
def arena():
    before = leaked_segments()
    owner = Arena.create(slots=2, region=1 << 20, tag="test")
    producer = Arena.attach(owner.name, 2, owner.region, slot=0)
    consumer = Arena.attach(owner.name, 2, owner.region, slot=1)
    producer.min_inline = consumer.min_inline = 0
    yield owner, producer, consumer
    for a in (consumer, producer, owner):
        a.close()
    assert leaked_segments() == before


def test_allocator_alloc_free_coalesce() -> None:
    a = Allocator(1024, align=64)
    x, y, z = a.alloc(10), a.alloc(64), a.alloc(65)
    assert (x, y, z) == (0, 64, 128)
    with pytest.raises(ArenaFull):
        a.alloc(1024)
    a.free(y)
    assert a.alloc(64) == 64  # first fit reuses the hole
    for off in (x, 64, z):
        a.free(off)
    assert a.is_empty()


def test_allocator_random_lifetimes_leave_no_leak() -> None:
    rng = random.Random(0)
    a = Allocator(1 << 20)
    live: list[int] = []
    for _ in range(1000):
        if live and (rng.random() < 0.5 or a.free_bytes < 70_000):
            a.free(live.pop(rng.randrange(len(live))))
        else:
            with contextlib.suppress(ArenaFull):
                live.append(a.alloc(rng.randint(1, 64_000)))
    for off in live:
        a.free(off)
    assert a.is_empty()


def test_put_view_release(arena) -> None:
    _, producer, consumer = arena
    t = torch.arange(1000, dtype=torch.bfloat16)
    desc = producer.put(t)
    got = consumer.view(desc)
    assert torch.equal(got, t)
    assert producer.live_blocks == 1
    assert consumer.drain_released() == {}
    del got
    gc.collect()
    released = consumer.drain_released()
    assert released == {0: [[desc[1], desc[5]]]}
    for off, gen in released[0]:
        producer.release(off, gen)
    assert producer.live_blocks == 0 and producer.alloc.is_empty()


def test_view_is_zero_copy(arena) -> None:
    _, producer, consumer = arena
    desc = producer.put(torch.zeros(256, dtype=torch.int32))
    a, b = consumer.view(desc), consumer.view(desc)
    assert a.data_ptr() == b.data_ptr()  # both map the same shared bytes
    views = [a[:10], b.reshape(16, 16)]
    del a, b
    gc.collect()
    assert consumer.drain_released() == {}  # a view of each is still alive
    del views
    gc.collect()
    assert len(consumer.drain_released()[0]) == 2


def test_write_once_refcount(arena) -> None:
    _, producer, consumer = arena
    t = torch.ones(100, 100)
    d1, d2 = producer.put(t), producer.put(t)  # fanned out to two consumers: one copy
    assert d1 == d2 and producer.live_blocks == 1
    producer.release(d1[1], d1[5])
    assert producer.live_blocks == 1  # the second consumer still holds it
    producer.release(d1[1], d1[5])
    assert producer.live_blocks == 0
    producer.release(d1[1], d1[5])  # a repeated release is ignored
    t.add_(1)  # changed in place: a new value, a new block
    d3 = producer.put(t)
    assert torch.equal(consumer.view(d3), t)


def test_full_region_falls_back_inline(arena) -> None:
    _, producer, _ = arena
    assert producer.put(torch.zeros(2 << 20, dtype=torch.uint8)) is None


def test_random_lifetimes_through_views(arena) -> None:
    _, producer, consumer = arena
    rng = random.Random(1)
    live = []
    for i in range(1000):
        if live and rng.random() < 0.5:
            live.pop(rng.randrange(len(live)))
        else:
            t = torch.full((rng.randint(1, 5000),), i, dtype=torch.float32)
            desc = producer.put(t)
            if desc is not None:
                live.append((consumer.view(desc), t))
        for slot, blocks in consumer.drain_released().items():
            assert slot == 0
            for off, gen in blocks:
                producer.release(off, gen)
    assert all(torch.equal(v, t) for v, t in live)
    live.clear()
    gc.collect()
    for _, blocks in consumer.drain_released().items():
        for off, gen in blocks:
            producer.release(off, gen)
    assert producer.live_blocks == 0 and producer.alloc.is_empty()
