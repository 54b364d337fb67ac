"""Same-host transport: one single-producer/single-consumer byte ring per process→process edge.

Between the processes of one host (the conductor and the ranks that share its arena) a message
does not need a broker: ZeroMQ's route (sender → its I/O thread → the receiver's I/O thread →
receiver) costs three thread hand-offs and a dozen syscalls per hop. Here the sender copies the
encoded batch into a ring in shared memory and publishes its write index; the receiver reads the
record where it lies. Nothing else moves unless the receiver is asleep.

**Where the rings live**: at the end of the host's arena segment (`segment.Segment`, ``extra``
bytes after the regions), so they are created, inherited and unlinked with it: a private segment
(mode 0600 in ``/dev/shm``, named per run), which is why no secret travels on this path (the
secret guards what crosses sockets). Layout (`ring_bytes`): ``slots`` control blocks of 64 bytes
(one per receiving process: its *sleeping* word), then ``slots × slots`` rings, ring
``(sender, receiver)`` at index ``sender * slots + receiver``, each a 128-byte head (the write
index at 0, the read index at 64: different cache lines) and ``capacity`` bytes of data. Slots
are the arena's: rank ``r`` is slot ``r``, the conductor slot ``world``.

**Records**: a 16-byte header (payload length, the receiver's *token*, flags FIRST/LAST) and the
payload, 16-byte aligned, possibly wrapping. The payload is the message's frames (the codec's
header frame and any tensor frames) as ``nframes, len...`` then their bytes. A batch larger than
a quarter of the ring travels as fragments (FIRST … LAST). Indices grow monotonically (64-bit)
and are published only at record boundaries, after the record's bytes: x86's store order (TSO)
makes a record visible no earlier than its index, so the ring is used only on x86-64 (elsewhere
`supported` is false and the host keeps ZeroMQ).

**Restarts**: a record carries the token of the receiver the sender addresses (a hash of its
inbox address, new for every incarnation of a process); a receiver drops records stamped for
another incarnation, as ZeroMQ drops what was queued for an old socket. A fragment sequence cut
short by a writer's death is dropped at the next FIRST.

**Doorbell** (`doorbell`): a receiver that found nothing sets its sleeping word, looks at its
rings once more and sleeps; a sender rings it only when that word is set, so a busy receiver
costs its senders no syscall. Before sleeping a receiver may spin briefly (`Rings.spin_s`:
``WGC_RING_SPIN_US`` after its last activity, only while the host's load average is below its
core count: spinning on a loaded host takes turns a peer needs).

**Back pressure**: a full ring never blocks the sender (two ranks sending to each other would
deadlock): what does not fit waits in the edge's queue, in order, and goes out when the receiver
has made room (`Rings.pump`, every loop turn). A queue past `MAX_QUEUED` bytes raises
`RingFull` (the caller's `TransportError`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import struct
import time
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from wgc_runtime.host.transport.doorbell import Fence, open_bell

CTL = 64  # control block per receiving slot
HEAD = 128  # per ring: write index at 0, read index at 64
ALIGN = 16
REC = struct.Struct("<IIII")  # payload length, receiver token, flags, unused
FIRST, LAST = 1, 2
WHOLE = FIRST | LAST
MAX_QUEUED = 1 << 30  # bytes waiting for one full ring before the sender gives up
_U32 = struct.Struct("<I")
LOAD_EVERY_S = 1.0


class RingFull(RuntimeError):
    """A receiver has not made room for a long time (its queue passed `MAX_QUEUED`)."""


def supported() -> bool:
    """Whether this machine's store order lets the ring publish without fences (x86-64)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def ring_bytes(slots: int, capacity: int) -> int:
    """The bytes the rings of ``slots`` processes take at the end of the arena segment."""
    return slots * CTL + slots * slots * (HEAD + capacity)


def token_of(address: str) -> int:
    """The token records for the process listening at ``address`` carry (never 0)."""
    return zlib.crc32(address.encode()) or 1


def _pad(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class _Out:
    """The sending end of one ring."""

    __slots__ = ("base", "bell", "cap", "queue", "queued", "r", "ridx", "sleeping", "token", "w")

    def __init__(self, buf: memoryview, base: int, cap: int, sleeping: memoryview) -> None:
        self.base = base + HEAD
        self.cap = cap
        self.w = buf[base : base + 8].cast("Q")
        self.ridx = buf[base + 64 : base + 72].cast("Q")
        self.r = self.ridx[0]
        self.sleeping = sleeping
        self.queue: deque[tuple[bytes | memoryview, int, int]] = deque()
        self.queued = 0
        self.token = 0
        self.bell = -1


class _In:
    """The receiving end of one ring."""

    __slots__ = ("base", "cap", "partial", "r", "ridx", "w")

    def __init__(self, buf: memoryview, base: int, cap: int) -> None:
        self.base = base + HEAD
        self.cap = cap
        self.w = buf[base : base + 8].cast("Q")
        self.ridx = buf[base + 64 : base + 72].cast("Q")
        self.r = self.ridx[0]
        self.partial: bytearray | None = None


class Rings:
    """One process's ends of the host's rings: it writes the rings to every other slot and
    reads the rings from them. ``buf``: the segment's buffer; ``offset``: where the rings begin
    in it; ``me``: this process's slot; ``token``: `token_of` its own inbox address;
    ``ipc_dir``: the deployment's private folder (the doorbells)."""

    def __init__(
        self,
        buf: memoryview,
        offset: int,
        slots: int,
        capacity: int,
        me: int,
        token: int,
        ipc_dir: str,
        spin_us: float = 0.0,
    ) -> None:
        if capacity % ALIGN or capacity < 4 * ALIGN:
            raise ValueError(f"ring capacity {capacity} is not a multiple of {ALIGN}")
        self.buf = buf
        self.slots = slots
        self.cap = capacity
        self.me = me
        self.token = token
        self.ipc_dir = ipc_dir
        self.fragment = capacity // 4
        rings = offset + slots * CTL

        def at(sender: int, receiver: int) -> int:
            return rings + (sender * slots + receiver) * (HEAD + capacity)

        self._ctl = [buf[offset + s * CTL : offset + s * CTL + 4].cast("I") for s in range(slots)]
        self._sleeping = self._ctl[me]
        self._fence = Fence()
        self.outs = {
            s: _Out(buf, at(me, s), capacity, self._ctl[s]) for s in range(slots) if s != me
        }
        self.ins = [_In(buf, at(s, me), capacity) for s in range(slots) if s != me]
        self.bell = open_bell(self._bell_path(me), os.O_RDWR)
        self.spin_s = spin_us * 1e-6
        self._ncpu = os.cpu_count() or 1
        self._load_at = -1e18
        self._calm = False

    def _bell_path(self, slot: int) -> str:
        return os.path.join(self.ipc_dir, f"bell-{slot}")

    # -------------------------------------------------------------- sending

    def connect(self, slot: int, address: str) -> None:
        """The process at ``slot`` listens at ``address`` (now): records for it carry its
        token; what was queued for an earlier incarnation is dropped."""
        out = self.outs[slot]
        token = token_of(address)
        if out.token not in (0, token):
            out.queue.clear()
            out.queued = 0
        out.token = token

    def send(self, slot: int, frames: Sequence[Any]) -> None:
        """Queue-or-write the frames of one batch for ``slot`` (never blocks)."""
        out = self.outs[slot]
        if len(frames) == 1:
            head = frames[0]
            payload: Any = b"".join((_U32.pack(1), _U32.pack(len(head)), head))
        else:
            views = [memoryview(f).cast("B") for f in frames]
            lens = struct.pack(f"<{len(views) + 1}I", len(views), *(v.nbytes for v in views))
            payload = b"".join([lens, *views])
        n = len(payload)
        if n <= self.fragment:
            pieces = [(payload, WHOLE)]
        else:
            view = memoryview(payload)
            pieces = []
            for start in range(0, n, self.fragment):
                flags = (FIRST if start == 0 else 0) | (LAST if start + self.fragment >= n else 0)
                pieces.append((view[start : start + self.fragment], flags))
        wrote = False
        for piece, flags in pieces:
            if out.queue or not self._write(out, piece, flags):
                out.queue.append((piece, flags, out.token))
                out.queued += len(piece)
            else:
                wrote = True
        if out.queued > MAX_QUEUED:
            raise RingFull(f"slot {slot} has not read its ring for {out.queued} bytes")
        if wrote:
            self._ring(slot, out)

    def _write(self, out: _Out, payload: Any, flags: int, token: int | None = None) -> bool:
        n = len(payload)
        need = REC.size + _pad(n)
        w = out.w[0]
        cap = out.cap
        if need > cap - (w - out.r):
            out.r = out.ridx[0]
            if need > cap - (w - out.r):
                return False
        buf, base = self.buf, out.base
        pos = w % cap
        REC.pack_into(buf, base + pos, n, out.token if token is None else token, flags, 0)
        pos += REC.size
        if pos == cap:
            pos = 0
        first = min(n, cap - pos)
        buf[base + pos : base + pos + first] = payload[:first]
        if first < n:
            buf[base : base + n - first] = payload[first:]
        out.w[0] = w + need  # published after the bytes (x86 keeps store order)
        return True

    def _ring(self, slot: int, out: _Out) -> None:
        self._fence()  # the record's publication before the sleeping word's read (`doorbell`)
        if out.sleeping[0]:
            if out.bell < 0:
                try:
                    out.bell = open_bell(self._bell_path(slot), os.O_WRONLY)
                except OSError as exc:
                    if exc.errno != errno.ENXIO:
                        raise
                    # nobody holds the bell: its receiver died asleep (its sleeping word is
                    # still set) and is being restarted, and reads its rings when it is back
                    return
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(out.bell, b"\0")

    def pump(self) -> None:
        """Write what waits in full rings' queues, as far as their receivers made room."""
        for slot, out in self.outs.items():
            if not out.queue:
                continue
            wrote = False
            while out.queue:
                piece, flags, token = out.queue[0]
                if not self._write(out, piece, flags, token):
                    break
                out.queue.popleft()
                out.queued -= len(piece)
                wrote = True
            if wrote:
                self._ring(slot, out)

    def backlog(self) -> bool:
        """Whether any queue waits for room."""
        return any(out.queue for out in self.outs.values())

    # -------------------------------------------------------------- receiving

    def ready(self) -> bool:
        """Whether any ring has a record this process has not read."""
        for ring in self.ins:  # noqa: SIM110 (a loop: no generator per call on the hot path)
            if ring.w[0] != ring.r:
                return True
        return False

    def take(self) -> Iterator[list[Any]]:
        """Every whole message in the rings now, as its frames. The header frame may view the
        ring: use it before asking for the next message (its space is handed back then);
        tensor frames are copies."""
        buf = self.buf
        mine = self.token
        for ring in self.ins:
            w = ring.w[0]
            r = ring.r
            cap, base = ring.cap, ring.base
            while r != w:
                pos = r % cap
                n, token, flags, _ = REC.unpack_from(buf, base + pos)
                start = pos + REC.size
                if start == cap:
                    start = 0
                if start + n <= cap:
                    payload: Any = buf[base + start : base + start + n]
                else:
                    payload = bytes(buf[base + start : base + cap]) + bytes(
                        buf[base : base + n - (cap - start)]
                    )
                r += REC.size + _pad(n)
                frames = None
                if token != mine:
                    ring.partial = None  # for another incarnation of this process
                elif flags == WHOLE:
                    frames = _frames(payload)
                elif flags & FIRST:
                    ring.partial = bytearray(payload)
                elif ring.partial is not None:
                    whole = ring.partial
                    whole += payload
                    if flags & LAST:
                        frames = _frames(memoryview(whole))
                        ring.partial = None
                if frames is not None:
                    yield frames
                ring.r = r
                ring.ridx[0] = r

    # -------------------------------------------------------------- sleeping

    def sleeping(self, on: bool) -> None:
        self._sleeping[0] = 1 if on else 0
        if on:
            self._fence()  # the sleeping word's store before the next look at the rings

    def drain_bell(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self.bell, 4096)

    def may_spin(self) -> bool:
        """Whether spinning before a sleep is allowed now (a window is set and the host's
        1-minute load is below its cores; the load is read at most once a second)."""
        if self.spin_s <= 0:
            return False
        now = time.monotonic()
        if now - self._load_at > LOAD_EVERY_S:
            self._load_at = now
            try:
                self._calm = os.getloadavg()[0] < self._ncpu
            except OSError:
                self._calm = False
        return self._calm

    def close(self) -> None:
        """Close the doorbells and let go of the segment (its owner can then unmap it)."""
        for fd in [self.bell, *(out.bell for out in self.outs.values())]:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.bell = -1
        views = [*self._ctl, *(v for e in [*self.outs.values(), *self.ins] for v in (e.w, e.ridx))]
        for view in views:
            view.release()
        self._ctl, self.outs, self.ins = [], {}, []


def attach(
    buf: memoryview,
    spec: dict[str, Any],
    me: int,
    address: str,
    ipc_dir: str | None,
    spin_us: float = 0.0,
) -> Rings | None:
    """This process's rings in the arena segment ``buf`` that ``spec`` (the boot's arena spec)
    describes; None when the segment has none, there is no private folder for the doorbells,
    or this machine cannot use them (`supported`). ``address``: this process's inbox."""
    capacity = int(spec.get("ring") or 0)
    if not capacity or ipc_dir is None or not supported():
        return None
    slots = int(spec["slots"])
    offset = slots * int(spec["region"])
    return Rings(buf, offset, slots, capacity, me, token_of(address), ipc_dir, spin_us)


def _frames(payload: Any) -> list[Any]:
    """The frames a record's payload holds: the header as a view, tensor frames as copies."""
    (count,) = _U32.unpack_from(payload, 0)
    lens = struct.unpack_from(f"<{count}I", payload, 4)
    at = 4 + 4 * count
    frames: list[Any] = []
    for i, n in enumerate(lens):
        piece = payload[at : at + n]
        frames.append(piece if i == 0 else bytearray(piece))
        at += n
    return frames
