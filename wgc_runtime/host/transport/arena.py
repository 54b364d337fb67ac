"""A preallocated shared-memory arena per host: tensors cross processes as small descriptors.

One POSIX shared-memory segment per host (``multiprocessing.shared_memory``), created by the
launcher before any worker starts and unlinked by it when the run ends (in ``finally``, in an
``atexit`` hook, and by multiprocessing's resource tracker if the launcher itself is killed).
Its name carries a unique per-run prefix (`segment_name`) so tests can list ``/dev/shm`` for
leaks. The segment is split into one equal *region* per producing process (``slot``: rank ``r``
is slot ``r``, the conductor is slot ``world_size``). Only a region's owner allocates in it, so
no lock is shared between processes:

* **write once** (`Arena.put`): the producer allocates a block in its region (first-fit over a
  sorted free list with coalescing, 64-byte aligned), copies the tensor in once, and returns a
  descriptor ``[slot, offset, nbytes, dtype, shape, generation]``. Putting the same unchanged
  tensor again while its block is live (a value fanned out to several ranks) adds a reference
  instead of a second copy.
* **map zero-copy** (`Arena.view`): a consumer wraps the block as a tensor without copying. When
  the last view of it is garbage-collected, a finalizer queues a release (`Arena.drain_released`);
  the process loop sends it to the owner, which calls `Arena.release`.
* **refcounted**: the block is freed when every consumer it was sent to has released it.

When the region is full (or a tensor is small: a descriptor round trip costs more than copying a
few KiB) `put` returns None and the caller sends the tensor inline as a ZeroMQ frame.
"""

from __future__ import annotations

import atexit
import bisect
import collections
import contextlib
import weakref
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import torch

from wgc_runtime.host.transport.segment import (  # the torch-free part, also the launcher's
    ALIGN,
    DEFAULT_REGION,
    PREFIX,
    leaked_segments,
    region_size,
    segment_name,
)
from wgc_runtime.host.transport.tensors import DTYPES, CodecError, tensor_bytes, tensor_meta

__all__ = [
    "ALIGN",
    "DEFAULT_REGION",
    "PREFIX",
    "Allocator",
    "Arena",
    "ArenaFull",
    "leaked_segments",
    "region_size",
    "segment_name",
]

MIN_INLINE_BYTES = 64 << 10  # smaller tensors go inline (a frame copy beats a release round trip)


class ArenaFull(Exception):
    """No free block is large enough."""


class Allocator:
    """First-fit allocation of aligned blocks in ``[0, size)`` with a sorted, coalesced free list.

    Process-local: only the region's owner allocates and frees.
    """

    def __init__(self, size: int, align: int = ALIGN) -> None:
        self.size = size
        self.align = align
        self.free_offsets: list[int] = [0] if size else []  # sorted
        self.free_sizes: dict[int, int] = {0: size} if size else {}
        self.live: dict[int, int] = {}  # offset -> size

    def alloc(self, nbytes: int) -> int:
        need = max(self.align, -(-nbytes // self.align) * self.align)
        for i, off in enumerate(self.free_offsets):
            have = self.free_sizes[off]
            if have < need:
                continue
            del self.free_sizes[off]
            if have == need:
                self.free_offsets.pop(i)
            else:
                self.free_offsets[i] = off + need
                self.free_sizes[off + need] = have - need
            self.live[off] = need
            return off
        raise ArenaFull(f"no free block of {need} bytes (region of {self.size} bytes)")

    def free(self, offset: int) -> None:
        size = self.live.pop(offset)
        i = bisect.bisect_left(self.free_offsets, offset)
        # merge with the following free block
        if i < len(self.free_offsets) and self.free_offsets[i] == offset + size:
            size += self.free_sizes.pop(self.free_offsets.pop(i))
        # merge with the preceding free block
        if i > 0:
            prev = self.free_offsets[i - 1]
            if prev + self.free_sizes[prev] == offset:
                self.free_sizes[prev] += size
                return
        self.free_offsets.insert(i, offset)
        self.free_sizes[offset] = size

    @property
    def free_bytes(self) -> int:
        return sum(self.free_sizes.values())

    def is_empty(self) -> bool:
        """Nothing live and the free list is one block: no leak, no fragmentation left."""
        return not self.live and self.free_offsets == ([0] if self.size else [])


@dataclass(slots=True)
class _Block:
    refs: int
    generation: int
    key: tuple | None
    source: torch.Tensor | None  # keeps the written tensor alive while its key is cached


class Arena:
    """One process's handle on the host's segment: it allocates in region ``slot`` and maps any
    region's blocks. Build with `create` (the launcher: owns and unlinks) or `attach`."""

    def __init__(
        self, shm: shared_memory.SharedMemory, slots: int, region: int, slot: int, owner: bool
    ) -> None:
        self.shm = shm
        self.name = shm.name
        self.slots = slots
        self.region = region
        self.slot = slot
        self.owner = owner
        self.base = slot * region if 0 <= slot < slots else 0
        self.alloc = Allocator(region if 0 <= slot < slots else 0)
        self.min_inline = MIN_INLINE_BYTES
        self._blocks: dict[int, _Block] = {}
        self._by_key: dict[tuple, int] = {}
        self._generation = 0
        self._released: collections.deque[tuple[int, int, int]] = collections.deque()
        assert shm.buf is not None  # a segment that is open has its buffer
        self._mem: np.ndarray | None = np.frombuffer(shm.buf, dtype=np.uint8)
        self._closed = False

    # -------------------------------------------------------------- lifecycle

    @classmethod
    def create(cls, slots: int, region: int | None = None, tag: str = "") -> Arena:
        """A new segment of ``slots`` regions, owned (unlinked) by this process."""
        region = region_size(slots) if region is None else region
        shm = shared_memory.SharedMemory(name=segment_name(tag), create=True, size=slots * region)
        arena = cls(shm, slots, region, -1, owner=True)
        atexit.register(arena.close)
        return arena

    @classmethod
    def attach(cls, name: str, slots: int, region: int, slot: int) -> Arena:
        """This process's handle on an existing segment; it allocates in region ``slot``.

        Spawned children share the launcher's resource tracker, so attaching registers nothing
        new and the launcher's unlink is the only one.
        """
        shm = shared_memory.SharedMemory(name=name, create=False)
        return cls(shm, slots, region, slot, owner=False)

    def spec(self) -> dict[str, Any]:
        """What a child needs to `attach` (msgpack-able)."""
        return {"name": self.name, "slots": self.slots, "region": self.region}

    def close(self) -> None:
        """Unmap (and, for the owner, unlink) the segment; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._mem = None
        try:
            self.shm.close()
        except BufferError:
            # a live view still maps it: forget the handle; the mapping goes with the last view
            self.shm._buf = None  # type: ignore[attr-defined]
            self.shm._mmap = None  # type: ignore[attr-defined]
        except OSError:
            pass
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()

    # -------------------------------------------------------------- producer side

    def put(self, t: torch.Tensor, refs: int = 1) -> list | None:
        """Write ``t`` into this process's region for ``refs`` consumers; its descriptor, or
        None when it should go inline (small, or no room)."""
        nbytes = t.nbytes  # cheap tests first: this runs for every tensor a process sends
        if nbytes < self.min_inline or self.alloc.size == 0 or not t.is_cpu:
            return None
        dtype, shape = tensor_meta(t)
        key = (t.data_ptr(), t._version, nbytes, dtype, tuple(shape), tuple(t.stride()))
        off = self._by_key.get(key)
        if off is not None:  # the same value, still live: one more consumer, no second copy
            block = self._blocks[off]
            block.refs += refs
            return [self.slot, off, nbytes, dtype, shape, block.generation]
        try:
            off = self.alloc.alloc(nbytes)
        except ArenaFull:
            return None
        start = self.base + off
        if self._mem is None:
            raise RuntimeError("the arena is closed")
        dst = torch.from_numpy(self._mem[start : start + nbytes])
        dst.copy_(torch.from_numpy(np.asarray(tensor_bytes(t))))
        self._generation += 1
        self._blocks[off] = _Block(refs, self._generation, key, t)
        self._by_key[key] = off
        return [self.slot, off, nbytes, dtype, shape, self._generation]

    def release(self, offset: int, generation: int) -> None:
        """A consumer is done with block ``offset``; free it when nobody holds it."""
        block = self._blocks.get(offset)
        if block is None or block.generation != generation:
            return  # a stale or repeated release
        block.refs -= 1
        if block.refs > 0:
            return
        del self._blocks[offset]
        if block.key is not None:
            self._by_key.pop(block.key, None)
        self.alloc.free(offset)

    @property
    def live_blocks(self) -> int:
        return len(self._blocks)

    # -------------------------------------------------------------- consumer side

    def view(self, desc: list) -> torch.Tensor:
        """The tensor ``desc`` describes, mapped without copying. When it (and every view of it)
        is gone, the release is queued for `drain_released`."""
        slot, off, nbytes, dtype, shape, generation = desc
        self._check(desc)
        start = int(slot) * self.region + int(off)
        assert self.shm.buf is not None  # an attached arena has its buffer
        arr = np.frombuffer(self.shm.buf, dtype=np.uint8, count=int(nbytes), offset=start)
        weakref.finalize(arr, self._released.append, (int(slot), int(off), int(generation)))
        flat = torch.from_numpy(arr).view(DTYPES[dtype])
        return flat.reshape(tuple(int(d) for d in shape))

    def _check(self, desc: list) -> None:
        """A descriptor from a socket is checked before it maps anything: its slot exists, its
        block lies inside that slot's region, and its size matches its dtype and shape."""
        slot, off, nbytes, dtype, shape, _ = desc
        torch_dtype = DTYPES.get(dtype) if isinstance(dtype, str) else None
        numel = 1
        for d in shape:
            numel *= d if isinstance(d, int) and d >= 0 else -1
        ok = (
            torch_dtype is not None
            and 0 <= slot < self.slots
            and off >= 0
            and nbytes >= 0
            and off + nbytes <= self.region
            and numel >= 0
            and numel * torch_dtype.itemsize == nbytes
        )
        if not ok:
            raise CodecError(f"an arena descriptor that does not fit the arena: {desc!r}")

    def has_released(self) -> bool:
        """Whether `drain_released` has anything (the process loop asks every turn)."""
        return bool(self._released)

    def drain_released(self) -> dict[int, list[list[int]]]:
        """Releases queued since the last call, grouped by owning slot: ``{slot: [[off, gen]]}``."""
        out: dict[int, list[list[int]]] = {}
        while self._released:
            slot, off, gen = self._released.popleft()
            out.setdefault(slot, []).append([off, gen])
        return out
