"""The receiving half of a `Mesh` (`wgc_runtime.host.transport.sockets`): waiting for traffic
(`wait`: a short busy-poll after activity, the same-host rings and their doorbell), reading the
inbox (`take`): each message's first frame must be the deployment's secret (else it is drained
unread, counted, and its sender may be cut off, `PeerGuard`), the rest is decoded into the
message types the inbox accepts, and a batch that does not decode is dropped and counted; arena
releases (`ArenaFree`) are handled here and never reach the cores.
"""

from __future__ import annotations

import hmac
import os
import time
from typing import TYPE_CHECKING, Any

import zmq

from wgc_runtime.contract.control import ArenaFree
from wgc_runtime.contract.messages import Message
from wgc_runtime.host.transport import cutoff
from wgc_runtime.host.transport.endpoints import (
    EVENTS,
    LOOPBACK,
    NOBLOCK,
    POLLIN,
    RCVMORE,
    FrameCodec,
    Peer,
    is_loopback,
    peer_address,
)
from wgc_runtime.host.transport.guard import PeerGuard
from wgc_runtime.host.transport.tuning import Tuning

if TYPE_CHECKING:
    from wgc_runtime.host.transport.arena import Arena
    from wgc_runtime.host.transport.ring import Rings

RECUT_S = 1.0  # a cut-off peer that reconnected is looked for again at most this often
RINGS = "rings"  # the event `Mesh.wait` reports for a record waiting in a ring
INBOX_EVERY_S = 0.01  # how often a process whose data peers are all on rings looks at its inbox


class Receiving:
    """The receiving half of `Mesh`: its methods read the attributes `Mesh.__init__` sets."""

    inbox: Any  # its zmq PULL socket (untyped, as `zmq.Context.socket` returns it)
    secret: bytes
    guard: PeerGuard
    arena: Arena | None
    rings: Rings | None
    tuning: Tuning
    host: str
    hosts: dict[Peer, str]
    poller: zmq.Poller
    tcp_address: str | None
    ipc_address: str | None
    rejected: int
    unauthenticated: int
    _codec: FrameCodec
    _resolve: Any
    _recut: dict[str, float]
    _pending: list[Message]
    _last_active: float
    _ring_only: bool
    _inbox_at: float

    @property
    def endpoints(self) -> list[str]:
        """Every address the inbox listens on."""
        return [a for a in (self.tcp_address, self.ipc_address) if a]

    def wait(self, poller: zmq.Poller, timeout_ms: float) -> list[tuple[Any, int]]:
        """``poller.poll(timeout_ms)``, busy-polling first for what is left of the busy-poll
        window after the last activity (`Tuning.busy_poll_us`; 0: never). With rings, a
        record waiting in one counts as an event (``(RINGS, POLLIN)``), and the sleep is
        announced to the senders (`Rings.sleeping`) so they ring the doorbell."""
        rings = self.rings
        if rings is not None:
            return self._wait_rings(rings, poller, timeout_ms)
        return self._wait(poller, timeout_ms)

    def _wait_rings(self, rings: Rings, poller: zmq.Poller, timeout_ms: float) -> list:
        if rings.ready():
            return [(RINGS, POLLIN)]
        if timeout_ms <= 0:
            return poller.poll(0)
        now = time.perf_counter()
        if rings.may_spin():  # a short spin on the rings (and now and then the sockets)
            until = self._last_active + rings.spin_s
            turn = 0
            while now < until:
                if rings.ready():
                    return [(RINGS, POLLIN)]
                turn += 1
                if not turn & 15:
                    events = poller.poll(0)
                    if events:
                        return events
                os.sched_yield()  # never hold a core a runnable peer needs
                now = time.perf_counter()
        if rings.backlog():  # a receiver makes room without a word: look again soon
            timeout_ms = min(timeout_ms, 1)
        rings.sleeping(True)
        try:
            rings.drain_bell()  # a syscall between announcing the sleep and looking again
            events = [] if rings.ready() else self._wait(poller, timeout_ms)
        finally:
            rings.sleeping(False)
        return events or ([(RINGS, POLLIN)] if rings.ready() else [])

    def _wait(self, poller: zmq.Poller, timeout_ms: float) -> list[tuple[Any, int]]:
        spin = self.tuning.busy_poll_us
        if timeout_ms > 0 and spin > 0:
            now = time.perf_counter()
            until = self._last_active + spin * 1e-6
            give_way = self.tuning.busy_poll_yield
            while now < until:
                events = poller.poll(0)
                if events:
                    return events
                if give_way:
                    os.sched_yield()
                now = time.perf_counter()
        return poller.poll(max(0, int(timeout_ms)))

    def poll(self, timeout_ms: float, inbox_ready: bool | None = None) -> list[Message]:
        """Messages that arrived within ``timeout_ms`` (all that are queued, at least one if any
        arrives in time); transport messages are handled here. ``inbox_ready``: whether the
        caller's own poller saw the inbox ready (None: unknown; see `take`)."""
        out: list[Message] = []
        if self.rings is not None:
            self.rings.pump()
        if timeout_ms > 0:
            events = self.wait(self.poller, timeout_ms)
            if not events:
                return out
            inbox_ready = any(sock is self.inbox for sock, _ in events)
        self.take(out, inbox_ready)
        return out

    def take(self, out: list[Message], inbox_ready: bool | None = None) -> None:
        """Append every message queued now to ``out`` (without waiting). With every data peer
        on a ring, the ZeroMQ inbox carries only the launcher's control messages: it is read
        when a poller saw it ready (``inbox_ready``) and otherwise at most every `INBOX_EVERY_S`
        (each look costs ZeroMQ two syscalls). Only a message taken is activity (the busy-poll
        and ring-spin window, `wait`): a look that finds nothing leaves the window as it was,
        so an idle loop's timer turns sleep at once instead of spinning after each."""
        had = len(out)
        if self.rings is not None:
            self._take_rings(self.rings, out)
            if not inbox_ready and self._ring_only:
                now = time.perf_counter()
                if now - self._inbox_at < INBOX_EVERY_S:
                    if len(out) > had:
                        self._last_active = now
                    return
                self._inbox_at = now
        inbox = self.inbox
        get = inbox.get
        secret = self.secret
        wary = self.guard.wary()  # after a bad frame, learn who sends each message
        while get(EVENTS) & POLLIN:
            first: Any = None
            try:
                if wary:
                    first = inbox.recv(NOBLOCK, copy=False)
                    token = first.bytes
                else:
                    token = inbox.recv(NOBLOCK)
            except zmq.Again:  # POLLIN with nothing to read: a CURVE peer's heartbeat does it
                break
            if not get(RCVMORE) or not hmac.compare_digest(token, secret):
                peer = self._drain(first)
                self._unauthenticated(peer)
                wary = True
                continue
            head = inbox.recv(NOBLOCK)  # a copy: cheaper than a zmq.Frame for a header
            frames: list[Any] = [head]
            while get(RCVMORE):  # tensor frames: zero-copy
                frames.append(inbox.recv(copy=False))
            try:
                batch = self._codec.decode(frames, self._resolve)
            except Exception as exc:  # whatever a frame does to the decoder, the process goes on
                self._reject(exc, peer_address(first) if first is not None else "a deployment peer")
                wary = True
                continue
            for msg in batch:
                if msg.__class__ is ArenaFree:
                    if self.arena is not None:
                        for off, gen in msg.blocks:
                            self.arena.release(off, gen)
                else:
                    out.append(msg)
        if len(out) > had:
            self._last_active = time.perf_counter()

    def _take_rings(self, rings: Rings, out: list[Message]) -> None:
        """Every message in this process's rings now (no secret: the segment is private)."""
        decode, resolve = self._codec.decode, self._resolve
        for frames in rings.take():
            try:
                batch = decode(frames, resolve)
            except Exception as exc:  # as on the socket: a bad record is dropped
                self._reject(exc, "a ring peer")
                continue
            for msg in batch:
                if msg.__class__ is ArenaFree:
                    if self.arena is not None:
                        for off, gen in msg.blocks:
                            self.arena.release(off, gen)
                else:
                    out.append(msg)

    def _drain(self, first: Any) -> str:
        """Drop the rest of a message unread; who sent it (as far as its frames tell)."""
        name = peer_address(first) if first is not None else None
        while self.inbox.get(RCVMORE):
            frame = self.inbox.recv(copy=False)
            if name is None:
                name = peer_address(frame)
        return name or "an unknown peer"

    def _unauthenticated(self, peer: str) -> None:
        self.unauthenticated += 1
        if self.guard.bad(peer, "a message without the deployment's secret") or (
            self.guard.is_cut(peer)
        ):
            self._cut(peer)

    def _cut(self, peer: str) -> None:
        """Shut down the connections of a cut-off peer (again, if it reconnected)."""
        now = time.monotonic()
        if now - self._recut.get(peer, -1e18) < RECUT_S:
            return
        self._recut[peer] = now
        if len(self._recut) > 1024:
            self._recut.pop(next(iter(self._recut)))
        if cutoff.peer_pid(peer) is None and peer in self._deployment_hosts():
            return  # a TCP address a process of the deployment shares: ignored, not cut
        cutoff.shut_down(self.endpoints, peer)

    def _deployment_hosts(self) -> set[str]:
        hosts = {self.host, *self.hosts.values()}
        return hosts | (LOOPBACK if any(is_loopback(h) for h in hosts) else set())

    def _reject(self, exc: BaseException, peer: str) -> None:
        self.rejected += 1
        self.guard.bad(peer, f"{type(exc).__name__}: {exc}", may_cut=False)

    def recv(self, timeout_s: float) -> Message | None:
        """One message within ``timeout_s`` (None if none arrived); the rest stay queued here."""
        deadline = time.monotonic() + timeout_s
        while not self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._pending.extend(self.poll(left * 1000))
        return self._pending.pop(0)
