"""ZeroMQ wiring between the launcher, the conductor, the workers and clients.

Every runtime process binds one ``PULL`` socket, its *inbox*, and keeps one ``PUSH`` socket per
peer it sends to (created on first use). One-way messages everywhere keep the loops simple: a
process never waits for a reply on a socket, it polls its inbox with a deadline. Peers are named
``"launcher"``, ``"conductor"`` and rank numbers; the launcher tells every process the address
table (`Mesh.set_peers`). Clients talk to the conductor over a separate ``ROUTER`` socket
(`ClientPort`), so a reply finds the client that asked.

**Where sockets listen** (`bind_address`): on ``127.0.0.1`` when no host is named, and then a
process's inbox listens *only* on a filesystem ``ipc://`` socket in a private folder (mode 0700:
the launcher's, removed when the run ends), which no other user can open; the conductor's client
port is the one TCP port. When the placement names hosts, every socket listens on its own host's
address (resolved to an interface address; never every interface unless asked with ``listen``),
peers on the same host still connect over ``ipc://`` (Unix domain sockets skip the TCP stack),
peers on other hosts over TCP, and the deployment's ZeroMQ CURVE keys
(`wgc_runtime.host.transport.keys`) encrypt and authenticate every connection: a peer without
the deployment's keys cannot finish the handshake. `Tuning.ipc` off (``WGC_IPC=0``) makes
loopback inboxes listen on TCP again.

**Only the deployment steers the deployment.** Every message a mesh sends starts with the
deployment's secret (32 random bytes the launcher hands its children when it spawns them, never
over a socket); an inbox drops, counts and reports any message without it, so a process that can
reach a TCP port (any local user, anyone on the network when hosts are named) can neither stop
the run nor inject data. Clients are not part of the deployment: the conductor's client port
(`ClientPort`) accepts client messages only (`Submit`, `Cancel`, `Ping`, `GetStats`), needs the
deployment's *client* key when CURVE is on, cuts off a client (by its routing id) that keeps
sending garbage, and knows when a client has gone (a send to it fails: `ClientPort.send`; ZMTP
heartbeats find a client whose host vanished), so the conductor can cancel what it left.

**One wire format** (`wgc_runtime.host.transport.codec`): every send is a batch of typed
messages (`wgc_runtime.contract.messages` and `.control`: core, launcher and transport messages
alike), every message a process has for one peer in one loop turn in one ZeroMQ send (one header
frame; small tensors inline in it). Sends try ``NOBLOCK`` first and fall back to the bounded
blocking send only when the peer's queue is full. Receiving, the header is copied (cheaper than a
``zmq.Frame`` for a few dozen bytes), any tensor frames are taken zero-copy, and the batch is
decoded with validation into the message types an inbox accepts (`control.INBOX`). **A frame
that does not decode is dropped**, whatever is wrong with it (every exception of the decoder is
caught): one bad packet must not stop a process. Bad frames are counted, logged once per peer per
minute, and a peer that keeps sending messages without the secret is cut off (`PeerGuard`,
`wgc_runtime.host.transport.guard`; its connections are shut down, `cutoff`); a message that
carries the secret is never cut off, so a stranger cannot lock a process of the deployment out.
`Mesh.wait` may busy-poll for a short window after activity (`Tuning.busy_poll_us`) before it
sleeps.

**How a tensor travels** (`Mesh.send`), by where the receiver is:

* same process (same rank): the caller hands it over by reference; nothing reaches this module;
* another process on this host: written once into the host's shared-memory arena, only its
  descriptor crosses the socket (small tensors and a full arena fall back to inline frames);
* another host: zero-copy ZeroMQ frames (``copy=False`` views of the tensor's memory).

Transport messages (`ArenaFree`: arena releases) are handled here and never reach the cores. A
send never blocks forever: every socket has a send timeout and a full queue to a peer raises
`TransportError`.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import zmq

from wgc_runtime.contract.control import CLIENT_IN, CLIENT_OUT, INBOX, ArenaFree, PeerEntry
from wgc_runtime.contract.messages import Message
from wgc_runtime.host.scratch import private_dir
from wgc_runtime.host.transport import cutoff
from wgc_runtime.host.transport.guard import PeerGuard
from wgc_runtime.host.transport.keys import CLIENT_DOMAIN, INBOX_DOMAIN, Keys
from wgc_runtime.host.transport.ring import RingFull
from wgc_runtime.host.transport.tuning import TUNING, Tuning

if TYPE_CHECKING:
    from wgc_runtime.host.transport.arena import Arena
    from wgc_runtime.host.transport.ring import Rings

LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}
WILDCARD = {"0.0.0.0", "*", "::"}
SEND_TIMEOUT_MS = 5000
HWM = 100_000
HEARTBEAT_MS = 2000  # ZMTP pings on the client port: a client whose host vanished is dropped
HEARTBEAT_TIMEOUT_MS = 6000
# ZMQ_MAXMSGSIZE of every socket: between processes of the deployment (a tensor too large for
# the arena travels inline), and from a client (a request's frames: its JSON body is at most
# `Limits.request_bytes`, 64 MiB, and decodes to no more than 4x that as tensors)
MAX_FRAME_BYTES = 1 << 32
CLIENT_FRAME_BYTES = 256 << 20
RECUT_S = 1.0  # a cut-off peer that reconnected is looked for again at most this often

Peer = int | str  # a rank, "conductor" or "launcher"
RINGS = "rings"  # the event `Mesh.wait` reports for a record waiting in a ring
INBOX_EVERY_S = 0.01  # how often a process whose data peers are all on rings looks at its inbox

# plain ints: pyzmq's enum flags cost a Python-level `Flag.__and__` (~1 µs) per use on the hot path
_EVENTS, _POLLIN, _RCVMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE)
_NOBLOCK = int(zmq.NOBLOCK)


class TransportError(RuntimeError):
    """A peer cannot be reached (its queue is full past the send deadline, or it is gone)."""


class FrameCodec(Protocol):
    """What a mesh encodes and decodes with (`codec.Codec`; the launcher's is tensor-free)."""

    def encode(self, msg: Any, place: Any = None) -> list[Any]: ...

    def decode(self, frames: Sequence[Any], resolve: Any = None) -> Any: ...


_S = TypeVar("_S", bound=zmq.Socket)


def watch(sock: _S, events: int) -> _S:
    """``sock.get_monitor_socket(events)`` at an inproc address of its own. pyzmq's default names
    the address by the socket's file descriptor, and a closed socket's monitor endpoint can
    outlive the descriptor (libzmq's reaper unbinds it later), so a new socket reusing the
    number could not be watched ("Address already in use": seen with many clients in threads)."""
    addr = f"inproc://wgc-monitor-{secrets.token_hex(8)}"
    return cast(_S, sock.get_monitor_socket(events, addr=addr))  # asyncio in, asyncio out


def is_loopback(host: str) -> bool:
    return host in LOOPBACK


def named_hosts(hosts: Iterable[str]) -> bool:
    """Whether a placement's hosts name any machine but this one's loopback."""
    return not all(is_loopback(h) for h in hosts)


def bind_address(own: str, hosts: Iterable[str], listen: str | None = None) -> str:
    """The interface a process on host ``own`` binds: ``listen`` when given (``0.0.0.0`` is the
    only way to get every interface), loopback when no host is named, else ``own`` resolved to
    an address (ZeroMQ binds addresses and interface names, not host names)."""
    if listen:
        return "0.0.0.0" if listen in WILDCARD else _resolve(listen)
    if not named_hosts(hosts):
        return "127.0.0.1"
    if own in WILDCARD:
        raise TransportError(
            f"`{own}` is not a host: name the machine a rank runs on (to listen on every "
            "interface, ask for it with `listen`)"
        )
    return _resolve(own)


def _resolve(host: str) -> str:
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise TransportError(f"cannot bind to host `{host}`: {exc}") from None


def _tune(sock: zmq.Socket, send: bool) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)  # a peer's frame past it: dropped, unread
    if send:
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    else:
        sock.setsockopt(zmq.RCVHWM, HWM)


def _peer_name(frame: Any) -> str:
    """The sender of a received ``zmq.Frame``, as ZeroMQ names it (``Peer-Address``)."""
    try:
        return str(frame.get("Peer-Address")) or "a local peer"
    except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
        return "an unknown peer"


def _default_codec(accepts: Sequence[type]) -> FrameCodec:
    from wgc_runtime.host.transport.codec import Codec  # torch: not for the launcher

    return Codec(accepts)


class Mesh:
    """One process's sockets: its inbox and its outgoing pipes to peers.

    ``me`` names this process; ``host`` is its host; ``bind`` the interface it listens on
    (`bind_address`); ``arena`` (optional) is this process's handle on the host's shared-memory
    arena; ``hosts`` maps peers to their hosts (filled by `set_peers`); ``tuning`` defaults to
    the environment's (`wgc_runtime.host.transport.tuning`); ``keys``: the deployment's CURVE
    keys (None: no CURVE); ``tcp``: whether the inbox also listens on TCP (None: unless it is on
    loopback and has its ``ipc`` socket); ``codec``: what it encodes and decodes with (default:
    the full wire format with tensors).
    """

    def __init__(
        self,
        me: Peer,
        host: str = "127.0.0.1",
        bind: str = "127.0.0.1",
        arena: Arena | None = None,
        ctx: zmq.Context | None = None,
        tuning: Tuning | None = None,
        secret: bytes | None = None,
        ipc_dir: str | None = None,
        keys: Keys | None = None,
        tcp: bool | None = None,
        codec: FrameCodec | None = None,
    ) -> None:
        self.me = me
        self.host = host
        self.arena = arena
        self.tuning = tuning or TUNING
        self.ctx = ctx or zmq.Context.instance()
        self.keys = keys
        # the deployment's secret: the first frame of every message, checked on receipt
        self.secret = secret if secret is not None else new_secret()
        self.inbox = self.ctx.socket(zmq.PULL)
        _tune(self.inbox, send=False)
        if keys is not None:
            keys.serve(self.inbox, INBOX_DOMAIN)
        self._ipc = _IpcPath(me, ipc_dir) if self.tuning.ipc else None
        self.ipc_address = self._ipc.bind(self.inbox) if self._ipc is not None else None
        if tcp is None:
            tcp = self.ipc_address is None or not is_loopback(bind)
        if tcp:
            port = self.inbox.bind_to_random_port(f"tcp://{bind}")
            self.tcp_address: str | None = f"tcp://{bind}:{port}"
            self.address = f"tcp://{bind if bind not in WILDCARD else host}:{port}"
        else:
            assert self.ipc_address is not None
            self.tcp_address = None
            self.address = self.ipc_address
        self.peers: dict[Peer, str] = {}
        self.hosts: dict[Peer, str] = {}
        self.ipc: dict[Peer, str] = {}
        self._out: dict[Peer, zmq.Socket] = {}
        self.poller = zmq.Poller()
        self.poller.register(self.inbox, _POLLIN)
        self.rejected = 0  # frames with the secret that did not decode (dropped)
        self.unauthenticated = 0  # messages without the deployment's secret (dropped)
        self.guard = PeerGuard(_name(me))
        self._recut: dict[str, float] = {}  # cut-off peer -> when its connections were last cut
        self._pending: list[Message] = []
        self._codec = codec or _default_codec(INBOX)
        self._resolve = arena.view if arena is not None else None
        self._last_active = 0.0  # perf_counter of the last send or receive (busy-poll window)
        # same-host peers with a ring (`wgc_runtime.host.transport.ring`): peer -> its slot
        self.rings: Rings | None = None
        self._ring_slot: dict[Peer, int] = {}
        self._ring_only = False  # every data peer (ranks, conductor) is on a ring
        self._inbox_at = 0.0  # perf_counter of the last look at the inbox (`take`)

    @property
    def endpoints(self) -> list[str]:
        """Every address the inbox listens on."""
        return [a for a in (self.tcp_address, self.ipc_address) if a]

    # -------------------------------------------------------------- wiring

    def set_peers(self, table: Sequence[PeerEntry]) -> None:
        """Everybody's addresses (the launcher's `Peers` table; again after a restart)."""
        for entry in table:
            self.connect(entry.who, entry.address, entry.host, entry.ipc)

    def connect(
        self, peer: Peer, address: str, host: str = "127.0.0.1", ipc: str | None = None
    ) -> None:
        """Where ``peer`` listens; a peer that moved (a restarted worker) gets a new socket (what
        was queued for its old self is dropped)."""
        if self.peers.get(peer) not in (None, address) or (
            peer in self.ipc and self.ipc[peer] != ipc
        ):
            old = self._out.pop(peer, None)
            if old is not None:
                old.close(0)
        self.peers[peer] = address
        self.hosts[peer] = host
        if ipc:
            self.ipc[peer] = ipc
        else:
            self.ipc.pop(peer, None)
        slot = self._slot_of(peer)
        if slot is not None and self.rings is not None and self.same_host(peer):
            self.rings.connect(slot, address)
            self._ring_slot[peer] = slot
        else:
            self._ring_slot.pop(peer, None)
        data = [p for p in self.peers if p != "launcher" and p != self.me]
        self._ring_only = bool(data) and all(p in self._ring_slot for p in data)

    def use_rings(self, rings: Rings | None) -> None:
        """Talk to same-host peers through ``rings`` (its token must be this inbox's:
        `ring.token_of` ``self.address``); peers already known switch over at once."""
        if rings is None:
            return
        self.rings = rings
        self.poller.register(rings.bell, _POLLIN)
        for peer in list(self.peers):
            self.connect(
                peer, self.peers[peer], self.hosts.get(peer, self.host), self.ipc.get(peer)
            )

    def _slot_of(self, peer: Peer) -> int | None:
        """The ring slot of ``peer`` (the arena's: rank r is r, the conductor the last)."""
        rings = self.rings
        if rings is None:
            return None
        if peer == "conductor":
            slot = rings.slots - 1
        elif isinstance(peer, int) and 0 <= peer < rings.slots - 1:
            slot = peer
        else:
            return None
        return slot if slot != rings.me else None

    def register(self, poller: zmq.Poller) -> None:
        """Watch this mesh's inbox (and its ring doorbell) with another poller."""
        poller.register(self.inbox, _POLLIN)
        if self.rings is not None:
            poller.register(self.rings.bell, _POLLIN)

    def _socket(self, peer: Peer) -> zmq.Socket:
        sock = self._out.get(peer)
        if sock is None:
            try:
                address = self.peers[peer]
            except KeyError:
                raise TransportError(f"{self.me}: no address for peer {peer!r}") from None
            if self.ipc_address is not None and peer in self.ipc and self.same_host(peer):
                address = self.ipc[peer]
            sock = self.ctx.socket(zmq.PUSH)
            _tune(sock, send=True)
            if self.keys is not None:
                self.keys.peer.apply(sock)
            sock.connect(address)
            self._out[peer] = sock
        return sock

    # -------------------------------------------------------------- sending

    def same_host(self, peer: Peer) -> bool:
        return self.hosts.get(peer, self.host) == self.host

    def _place(self, peer: Peer) -> Any:
        return self.arena.put if self.arena is not None and self.same_host(peer) else None

    def send(self, peer: Peer, msgs: Sequence[Message]) -> None:
        """Messages for ``peer``, in order, as one batch (their tensors: small ones inline,
        large ones in the arena on this host, frames elsewhere; through the peer's ring when it
        has one). Raises `TransportError` when the peer's queue stays full."""
        slot = self._ring_slot.get(peer)
        if slot is not None:
            assert self.rings is not None
            try:
                self.rings.send(slot, self._codec.encode(list(msgs), self._place(peer)))
            except RingFull as exc:
                who = f"{_name(self.me)} could not send to {_name(peer)}"
                raise TransportError(f"{who}: {exc}") from None
            self._last_active = time.perf_counter()
            return
        self._send(peer, self._codec.encode(list(msgs), self._place(peer)))

    def _send(self, peer: Peer, frames: list[Any]) -> None:
        sock = self._out.get(peer) or self._socket(peer)
        frames = [self.secret, *frames]
        try:
            try:  # the common case: room in the queue, no timeout bookkeeping
                if len(frames) == 1:
                    sock.send(frames[0], _NOBLOCK)
                else:
                    sock.send_multipart(frames, _NOBLOCK, copy=False)
            except zmq.Again:  # the peer's queue is full: wait (bounded by SNDTIMEO)
                sock.send_multipart(frames, copy=False)
        except zmq.Again:
            raise TransportError(
                f"{_name(self.me)} could not send to {_name(peer)} for "
                f"{SEND_TIMEOUT_MS / 1000:.0f} s (is it alive?)"
            ) from None
        self._last_active = time.perf_counter()

    def flush_releases(self) -> None:
        """Tell owners which arena blocks this process is done with."""
        if self.arena is None or not self.arena.has_released():
            return
        for slot, blocks in self.arena.drain_released().items():
            if slot == self.arena.slot:
                for off, gen in blocks:
                    self.arena.release(off, gen)
            else:
                owner: Peer = "conductor" if slot == self.arena.slots - 1 else slot
                free = ArenaFree(tuple((off, gen) for off, gen in blocks))
                # an owner that is gone takes its region with it
                with contextlib.suppress(TransportError):
                    self.send(owner, [free])

    # -------------------------------------------------------------- receiving

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
            return [(RINGS, _POLLIN)]
        if timeout_ms <= 0:
            return poller.poll(0)
        now = time.perf_counter()
        if rings.may_spin():  # a short spin on the rings (and now and then the sockets)
            until = self._last_active + rings.spin_s
            turn = 0
            while now < until:
                if rings.ready():
                    return [(RINGS, _POLLIN)]
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
        return events or ([(RINGS, _POLLIN)] if rings.ready() else [])

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
        (each look costs ZeroMQ two syscalls)."""
        if self.rings is not None:
            self._take_rings(self.rings, out)
            if not inbox_ready and self._ring_only:
                now = time.perf_counter()
                if now - self._inbox_at < INBOX_EVERY_S:
                    self._last_active = now
                    return
                self._inbox_at = now
        inbox = self.inbox
        get = inbox.get
        secret = self.secret
        wary = self.guard.wary()  # after a bad frame, learn who sends each message
        while get(_EVENTS) & _POLLIN:
            first: Any = None
            try:
                if wary:
                    first = inbox.recv(_NOBLOCK, copy=False)
                    token = first.bytes
                else:
                    token = inbox.recv(_NOBLOCK)
            except zmq.Again:  # POLLIN with nothing to read: a CURVE peer's heartbeat does it
                break
            if not get(_RCVMORE) or not hmac.compare_digest(token, secret):
                peer = self._drain(first)
                self._unauthenticated(peer)
                wary = True
                continue
            head = inbox.recv(_NOBLOCK)  # a copy: cheaper than a zmq.Frame for a header
            frames: list[Any] = [head]
            while get(_RCVMORE):  # tensor frames: zero-copy
                frames.append(inbox.recv(copy=False))
            try:
                batch = self._codec.decode(frames, self._resolve)
            except Exception as exc:  # whatever a frame does to the decoder, the process goes on
                self._reject(exc, _peer_name(first) if first is not None else "a deployment peer")
                wary = True
                continue
            for msg in batch:
                if msg.__class__ is ArenaFree:
                    if self.arena is not None:
                        for off, gen in msg.blocks:
                            self.arena.release(off, gen)
                else:
                    out.append(msg)
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
        name = _peer_name(first) if first is not None else None
        while self.inbox.get(_RCVMORE):
            frame = self.inbox.recv(copy=False)
            if name is None:
                name = _peer_name(frame)
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

    def close(self, linger_ms: int = 0) -> None:
        """Close every socket; messages still queued are dropped, or sent for up to
        ``linger_ms`` (a process's last words: why it failed to start)."""
        for sock in self._out.values():
            sock.close(linger_ms)
        self._out.clear()
        if self.rings is not None:
            self.rings.close()
            self.rings = None
            self._ring_slot.clear()
        self.inbox.close(0)
        if self._ipc is not None:
            self._ipc.remove()


class ClientPort:
    """The conductor's socket for clients (``ROUTER``): messages carry the client's identity.

    ``keys``: the deployment's CURVE keys (clients then need its client key)."""

    def __init__(
        self, bind: str = "127.0.0.1", ctx: zmq.Context | None = None, keys: Keys | None = None
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        _tune(self.sock, send=True)
        # a client's frame past this is never received (libzmq drops the connection unread)
        self.sock.setsockopt(zmq.MAXMSGSIZE, CLIENT_FRAME_BYTES)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a client that left fails
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_MS)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        if keys is not None:
            keys.serve(self.sock, CLIENT_DOMAIN)
        port = self.sock.bind_to_random_port(f"tcp://{bind}")
        self.address = f"tcp://{bind}:{port}"
        self._codec = _default_codec(CLIENT_IN)
        self._out = _default_codec(CLIENT_OUT)
        self.rejected = 0
        self.ignored = 0  # frames from cut-off clients, dropped unread
        self.guard = PeerGuard("the client port")

    def recv_all(self) -> list[tuple[bytes, Message]]:
        """Every client message queued now, with its client's identity (frames that do not
        decode as client messages are dropped; so is everything from a cut-off client)."""
        out = []
        sock = self.sock
        while sock.get(_EVENTS) & _POLLIN:  # no zmq.Again exception per call
            try:
                frames = sock.recv_multipart(_NOBLOCK, copy=False)
            except zmq.Again:  # POLLIN with nothing to read: a CURVE client's heartbeat does it
                break
            ident = frames[0].bytes
            name = client_name(ident)
            if self.guard.is_cut(name):
                self.ignored += 1
                continue
            try:
                batch = self._codec.decode(frames[1:])
            except Exception as exc:  # whatever a frame does to the decoder, the port goes on
                self.rejected += 1
                self.guard.bad(name, f"{type(exc).__name__}: {exc}")
                continue
            out.extend((ident, msg) for msg in batch)
        return out

    def send(self, ident: bytes, msgs: Sequence[Message]) -> bool:
        """False when the client is gone (or cut off, or not reading: its queue is full); its
        messages are dropped."""
        if self.guard.is_cut(client_name(ident)):
            return False
        try:
            self.sock.send_multipart([ident, *self._out.encode(list(msgs))], copy=False)
            return True
        except (zmq.Again, zmq.error.ZMQError):
            return False

    def close(self) -> None:
        self.sock.close(0)


def client_name(ident: bytes) -> str:
    """A client's routing id as it appears in log lines (printable, bounded)."""
    text = ident[:64].decode("ascii", "replace")
    return f"client {text}" if text.isprintable() else f"client 0x{ident[:32].hex()}"


def new_secret() -> bytes:
    """A fresh deployment secret (32 random bytes)."""
    return secrets.token_bytes(32)


class _IpcPath:
    """A filesystem ``ipc://`` socket for an inbox, in a private folder (mode 0700): the
    deployment's (``ipc_dir``, made by the launcher and removed by it), or one of its own (swept
    once this process is gone: `scratch`). Others cannot connect (abstract sockets could)."""

    def __init__(self, me: Peer, ipc_dir: str | None) -> None:
        self.own_dir = ipc_dir is None
        self.dir = ipc_dir if ipc_dir is not None else private_dir("wgc-ipc-")
        self.path = os.path.join(self.dir, f"{_file_name(me)}-{secrets.token_hex(4)}.sock")

    def bind(self, sock: zmq.Socket) -> str | None:
        """The bound address, or None where ipc sockets are not available (or the path is
        too long for a Unix socket)."""
        if sys.platform.startswith("win") or len(self.path) > 100:
            return None
        address = f"ipc://{self.path}"
        try:
            sock.bind(address)
        except zmq.ZMQError:
            return None
        return address

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def _file_name(peer: Peer) -> str:
    return f"rank{peer}" if isinstance(peer, int) else str(peer)


def _name(peer: Peer) -> str:
    return f"rank {peer}" if isinstance(peer, int) else str(peer)
