"""The host's shared-memory segment as the launcher sees it: a name, a size, and its removal.

The launcher creates the segment that `wgc_runtime.host.transport.arena` divides into regions
and unlinks it when the run ends; it never maps a tensor, so this part of the arena needs no
torch (nor numpy). Segment names carry a unique per-run prefix (`segment_name`) so tests can list
``/dev/shm`` for leaks (`leaked_segments`); `region_size` caps a region so the whole segment fits
in half of what ``/dev/shm`` has free. The same-host rings (`wgc_runtime.host.transport.ring`)
live after the regions when the segment is made with ``ring`` bytes per ring.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
from multiprocessing import shared_memory
from typing import Any

ALIGN = 64
PREFIX = "wgc-"  # every segment this runtime creates starts with it (see `leaked_segments`)
DEFAULT_REGION = 256 << 20  # sparse: pages are committed only when written


def segment_name(tag: str = "") -> str:
    """A unique segment name for this run: ``wgc-<pid>-<random>[-tag]``."""
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    return f"{name}-{tag}" if tag else name


def leaked_segments(prefix: str = PREFIX) -> set[str]:
    """Names in ``/dev/shm`` that start with ``prefix`` (empty where /dev/shm does not exist)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}
    except FileNotFoundError:
        return set()


def region_size(slots: int, wanted: int = DEFAULT_REGION) -> int:
    """``wanted`` bytes per region, capped so the whole segment fits in half of the free space
    of ``/dev/shm`` (a container's small /dev/shm would otherwise SIGBUS on first touch)."""
    try:
        st = os.statvfs("/dev/shm")
        free = st.f_bavail * st.f_frsize
    except (FileNotFoundError, OSError):
        return wanted
    cap = (free // 2) // max(slots, 1)
    return max(ALIGN, min(wanted, cap) // ALIGN * ALIGN)


class Segment:
    """A new segment of ``slots`` regions of ``region`` bytes, owned (unlinked) by this
    process: at `close`, at exit, and by multiprocessing's resource tracker if it is killed."""

    def __init__(self, slots: int, region: int, tag: str = "", ring: int = 0) -> None:
        from wgc_runtime.host.transport.ring import ring_bytes  # stdlib only

        self.slots = slots
        self.region = region
        self.ring = ring  # bytes per same-host ring after the regions (0: no rings)
        extra = ring_bytes(slots, ring) if ring else 0
        self.shm = shared_memory.SharedMemory(
            name=segment_name(tag), create=True, size=slots * region + extra
        )
        self.name = self.shm.name
        self._closed = False
        atexit.register(self.close)

    def spec(self) -> dict[str, Any]:
        """What a child needs to attach (`Arena.attach`)."""
        return {"name": self.name, "slots": self.slots, "region": self.region, "ring": self.ring}

    def close(self) -> None:
        """Unmap and unlink; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, BufferError):
            self.shm.close()
        with contextlib.suppress(FileNotFoundError):
            self.shm.unlink()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
