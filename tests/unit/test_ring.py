"""The same-host rings: records arrive whole and in order (wrapping, fragmented, queued while the
ring is full), records for another incarnation of the receiver are dropped, the doorbell rings
only for a sleeping receiver, and a `Mesh` with rings carries typed batches and wakes on them."""

from __future__ import annotations

import contextlib
import os
import select
import tempfile
import threading
import time
from collections.abc import Iterator
from multiprocessing import shared_memory

import pytest
import torch

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import Edge
from wgc_runtime.host.transport import ring
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.sockets import Mesh
from wgc_runtime.host.transport.tuning import Tuning

pytestmark = pytest.mark.skipif(not ring.supported(), reason="rings need x86-64's store order")
CAP = 4096
SECRET = b"s" * 32


def pair(slots: int = 2, cap: int = CAP) -> tuple[ring.Rings, ring.Rings, str]:
    buf = memoryview(bytearray(ring.ring_bytes(slots, cap)))
    folder = tempfile.mkdtemp(prefix="wgc-test-ring-")
    a = ring.Rings(buf, 0, slots, cap, 0, ring.token_of("a"), folder)
    b = ring.Rings(buf, 0, slots, cap, 1, ring.token_of("b"), folder)
    a.connect(1, "b")
    b.connect(0, "a")
    return a, b, folder


def read(r: ring.Rings) -> list[list[bytes]]:
    return [[bytes(f) for f in frames] for frames in r.take()]


def test_records_arrive_whole_and_in_order_across_many_wraps() -> None:
    a, b, _ = pair()
    got: list[list[bytes]] = []
    sent = []
    for k in range(500):
        frames = [bytes([k % 251]) * (k % 97)]
        if k % 7 == 0:
            frames.append(bytes(range(k % 50)))  # a tensor frame
        sent.append(frames)
        a.send(1, frames)
        if k % 3 == 0:
            got.extend(read(b))
    got.extend(read(b))
    assert got == sent


def test_a_batch_larger_than_the_ring_travels_as_fragments() -> None:
    a, b, _ = pair()
    big = os.urandom(3 * CAP + 5)
    a.send(1, [b"head", big])
    a.send(1, [b"after"])
    got: list[list[bytes]] = []
    for _ in range(20):  # the receiver makes room, the sender's queue moves on
        got.extend(read(b))
        a.pump()
    assert got == [[b"head", big], [b"after"]]
    assert not a.backlog()


def test_a_full_ring_queues_in_order_and_never_blocks() -> None:
    a, b, _ = pair()
    sent = [[os.urandom(500)] for _ in range(40)]  # ~20 KiB into a 4 KiB ring
    for frames in sent:
        a.send(1, frames)
    assert a.backlog()
    got: list[list[bytes]] = []
    while len(got) < len(sent):
        got.extend(read(b))
        a.pump()
    assert got == sent


def test_records_for_another_incarnation_are_dropped() -> None:
    a, b, folder = pair()
    a.send(1, [b"for b"])
    a.connect(1, "b, restarted")  # a believes b moved: b's old self must not read the rest
    a.send(1, [b"for the new b"])
    assert read(b) == [[b"for b"]]
    b2 = ring.Rings(b.buf, 0, 2, CAP, 1, ring.token_of("b, restarted"), folder)
    a.send(1, [b"again"])
    assert read(b2) == [[b"again"]]


def test_the_doorbell_rings_only_for_a_sleeping_receiver() -> None:
    a, b, _ = pair()

    def rung() -> bool:
        return bool(select.select([b.bell], [], [], 0)[0])

    a.send(1, [b"x"])
    assert not rung()
    b.sleeping(True)
    a.send(1, [b"y"])
    assert rung()
    b.sleeping(False)
    b.drain_bell()
    assert not rung()
    assert read(b) == [[b"x"], [b"y"]]


def test_a_receiver_that_died_asleep_does_not_take_its_sender_down() -> None:
    # the kill matrix: a rank SIGKILLed while asleep leaves its sleeping word set and nobody
    # holding its bell; a peer sending to it must not crash (ENXIO opening the FIFO)
    a, b, _ = pair()
    b.sleeping(True)
    os.close(b.bell)  # its process is gone
    a.send(1, [b"lost"])
    a.send(1, [b"again"])  # and again, while it restarts
    assert read(b) == [[b"lost"], [b"again"]]  # the records wait in the ring


def test_a_mesh_sends_typed_batches_through_its_ring_and_wakes_on_the_doorbell() -> None:
    owner = Arena.create(slots=2, region=4 << 20, tag="ring")
    arenas = [Arena.attach(owner.name, 2, owner.region, slot=s) for s in (0, 1)]
    slots = 3  # two ranks and the conductor
    shm = shared_memory.SharedMemory(create=True, size=ring.ring_bytes(slots, 1 << 16))
    folder = tempfile.mkdtemp(prefix="wgc-test-ring-")
    tuning = Tuning(ring=True)
    a, b = (Mesh(r, arena=arenas[r], tuning=tuning, secret=SECRET) for r in (0, 1))
    try:
        for mesh in (a, b):
            assert shm.buf is not None
            token = ring.token_of(mesh.address)
            mesh.use_rings(ring.Rings(shm.buf, 0, slots, 1 << 16, int(mesh.me), token, folder))
        a.connect(1, b.address, ipc=b.ipc_address)
        b.connect(0, a.address, ipc=a.ipc_address)
        big = torch.randn(256, 256)  # through the arena: only its descriptor rides the ring
        sent = [m.Value("r", 1, "w", k, "x", Edge.INPUT, None, (), False, big + k) for k in (0, 1)]

        def later() -> None:
            time.sleep(0.1)  # b is asleep by now: only the doorbell can wake it in time
            a.send(1, [*sent, m.WalkDone("r", 1, "w", 0)])

        sender = threading.Thread(target=later)
        sender.start()
        t0 = time.monotonic()
        got = b.poll(5000)
        waited = time.monotonic() - t0
        sender.join()
        assert waited < 4.0, "the doorbell did not wake the receiver"
        assert a._out == {} and b._out == {}, "nothing went over ZeroMQ"
        assert [type(x) for x in got] == [m.Value, m.Value, m.WalkDone]
        for s, r in zip(sent, got[:2], strict=True):
            assert isinstance(r, m.Value) and torch.equal(r.data, s.data)
        a.send(1, [c.Shutdown()])
        assert b.poll(1000) == [c.Shutdown()]
        del got, r
        b.flush_releases()  # the arena blocks go back to their owner through the ring too
        for _ in range(50):
            if not arenas[0].live_blocks:
                break
            a.poll(20)
        assert arenas[0].live_blocks == 0
    finally:
        a.close()
        b.close()
        for arena in (*arenas, owner):
            arena.close()
        shm.close()
        shm.unlink()


def test_attach_finds_the_rings_after_the_arena_regions_or_none() -> None:
    spec = {"name": "x", "slots": 3, "region": 128, "ring": CAP}
    buf = memoryview(bytearray(3 * 128 + ring.ring_bytes(3, CAP)))
    folder = tempfile.mkdtemp(prefix="wgc-test-ring-")
    rings = ring.attach(buf, spec, 2, "conductor-address", folder)
    assert rings is not None and rings.slots == 3 and rings.me == 2
    assert rings.token == ring.token_of("conductor-address")
    rings.close()
    assert ring.attach(buf, {**spec, "ring": 0}, 2, "a", folder) is None  # made without rings
    assert ring.attach(buf, spec, 2, "a", None) is None  # no private folder for the doorbells


@contextlib.contextmanager
def ring_meshes(cap: int = 1 << 14) -> Iterator[tuple[Mesh, Mesh]]:
    """Two meshes (ranks 0 and 1 of three slots) connected through rings of ``cap`` bytes and
    no arena."""
    slots = 3
    shm = shared_memory.SharedMemory(create=True, size=ring.ring_bytes(slots, cap))
    folder = tempfile.mkdtemp(prefix="wgc-test-ring-")
    a, b = (Mesh(r, tuning=Tuning(ring=True), secret=SECRET) for r in (0, 1))
    try:
        for mesh in (a, b):
            assert shm.buf is not None
            token = ring.token_of(mesh.address)
            mesh.use_rings(ring.Rings(shm.buf, 0, slots, cap, int(mesh.me), token, folder))
        a.connect(1, b.address)
        b.connect(0, a.address)
        yield a, b
    finally:
        a.close()
        b.close()
        shm.close()
        shm.unlink()


def test_a_mesh_batch_larger_than_its_ring_arrives_whole() -> None:
    with ring_meshes() as (a, b):
        big = torch.randn(512, 512)  # 1 MiB, no arena: a tensor frame, 64 ring fragments
        a.send(1, [m.Value("r", 1, "w", 0, "x", Edge.INPUT, None, (), False, big)])
        got: list = []
        for _ in range(2000):
            if got:
                break
            a.poll(0)  # the sender's queue moves as the receiver makes room
            got.extend(b.poll(1))
        assert len(got) == 1 and torch.equal(got[0].data, big)


def test_only_a_message_taken_opens_the_spin_window() -> None:
    # an idle loop's timer turn looks (`poll(0)`) and finds nothing: that must not count as
    # activity, or every turn spins `spin_s` before its next sleep (issue 29's flat conductor)
    with ring_meshes() as (a, b):
        b._last_active = 0.0
        for _ in range(3):
            assert b.poll(0) == []
        assert b._last_active == 0.0, "an empty look counted as activity"
        a.send(1, [m.WalkDone("r", 1, "w", 0)])
        assert [type(x) for x in b.poll(0)] == [m.WalkDone]
        assert b._last_active > 0.0
