"""ZeroMQ wiring between the launcher, the conductor, the workers and clients.

Every runtime process binds one ``PULL`` socket, its *inbox*, and keeps one ``PUSH`` socket per
peer it sends to (created on first use). One-way messages everywhere keep the loops simple: a
process never waits for a reply on a socket, it polls its inbox with a deadline. Peers are named
``"launcher"``, ``"conductor"`` and rank numbers; the launcher tells every process the address
table (`Mesh.set_peers`). Clients talk to the conductor over a separate ``ROUTER`` socket
(`ClientPort`), so a reply finds the client that asked.

Sockets bind to ``127.0.0.1`` unless the placement names hosts (then to the process's host).
Every inbox also binds a filesystem ``ipc://`` socket in a private folder (mode 0700: the
launcher's, removed when the run ends): peers on the same host connect there (Unix domain
sockets skip the TCP stack), peers on other hosts over TCP (`Tuning.ipc` turns it off).

**Only the deployment steers the deployment.** Every message a mesh sends starts with the
deployment's secret (32 random bytes the launcher hands its children when it spawns them, never
over a socket); an inbox drops, counts and reports any message without it, so a process that can
reach a TCP port (any local user, anyone on the network when hosts are named) can neither stop
the run nor inject data. Clients are not part of the deployment: the conductor's client port
(`ClientPort`) accepts client messages only (`Submit`, `Cancel`, `Ping`).

**One wire format** (`wgc_runtime.host.transport.codec`): every send is a batch of typed
messages (`wgc_runtime.contract.messages` and `.control`: core, launcher and transport messages
alike), every message a process has for one peer in one loop turn in one ZeroMQ send (one header
frame; small tensors inline in it). Sends try ``NOBLOCK`` first and fall back to the bounded
blocking send only when the peer's queue is full. Receiving, the header is copied (cheaper than a
``zmq.Frame`` for a few dozen bytes), any tensor frames are taken zero-copy, and the batch is
decoded with validation into the message types an inbox accepts (`control.INBOX`). **A frame
that does not decode is dropped** (and counted, with a line on stderr for the first few): one bad
packet must not stop a process. `Mesh.wait` may busy-poll for a short window after activity
(`Tuning.busy_poll_us`) before it sleeps.

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
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from typing import Any

import zmq

from wgc_runtime.contract.control import CLIENT_IN, CLIENT_OUT, INBOX, ArenaFree, PeerEntry
from wgc_runtime.contract.messages import Message
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.codec import Codec, CodecError
from wgc_runtime.host.transport.tuning import TUNING, Tuning

LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}
SEND_TIMEOUT_MS = 5000
HWM = 100_000
REPORT_BAD_FRAMES = 5  # lines on stderr about undecodable frames, per socket (then only counted)

Peer = int | str  # a rank, "conductor" or "launcher"

# plain ints: pyzmq's enum flags cost a Python-level `Flag.__and__` (~1 µs) per use on the hot path
_EVENTS, _POLLIN, _RCVMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE)
_NOBLOCK = int(zmq.NOBLOCK)


class TransportError(RuntimeError):
    """A peer cannot be reached (its queue is full past the send deadline, or it is gone)."""


def bind_host(hosts: Iterable[str], own: str) -> str:
    """The address to bind: loopback when every host is loopback, else this process's host."""
    return "127.0.0.1" if all(h in LOOPBACK for h in hosts) else own


def _tune(sock: zmq.Socket, send: bool) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    if send:
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    else:
        sock.setsockopt(zmq.RCVHWM, HWM)


class Mesh:
    """One process's sockets: its inbox and its outgoing pipes to peers.

    ``me`` names this process; ``host`` is its host; ``arena`` (optional) is this process's
    handle on the host's shared-memory arena; ``hosts`` maps peers to their hosts (filled by
    `set_peers`); ``tuning`` defaults to the environment's (`wgc_runtime.host.transport.tuning`).
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
    ) -> None:
        self.me = me
        self.host = host
        self.arena = arena
        self.tuning = tuning or TUNING
        self.ctx = ctx or zmq.Context.instance()
        # the deployment's secret: the first frame of every message, checked on receipt
        self.secret = secret if secret is not None else new_secret()
        self.inbox = self.ctx.socket(zmq.PULL)
        _tune(self.inbox, send=False)
        port = self.inbox.bind_to_random_port(f"tcp://{bind}")
        self.address = f"tcp://{bind if bind != '0.0.0.0' else host}:{port}"
        self._ipc = _IpcPath(me, ipc_dir) if self.tuning.ipc else None
        self.ipc_address = self._ipc.bind(self.inbox) if self._ipc is not None else None
        self.peers: dict[Peer, str] = {}
        self.hosts: dict[Peer, str] = {}
        self.ipc: dict[Peer, str] = {}
        self._out: dict[Peer, zmq.Socket] = {}
        self.poller = zmq.Poller()
        self.poller.register(self.inbox, _POLLIN)
        self.rejected = 0  # frames that did not decode (dropped)
        self.unauthenticated = 0  # messages without the deployment's secret (dropped)
        self._pending: list[Message] = []
        self._codec = Codec(INBOX)
        self._resolve = arena.view if arena is not None else None
        self._last_active = 0.0  # perf_counter of the last send or receive (busy-poll window)

    # -------------------------------------------------------------- wiring

    def set_peers(self, table: Sequence[PeerEntry]) -> None:
        """Everybody's addresses (the launcher's `Peers` table)."""
        for entry in table:
            self.connect(entry.who, entry.address, entry.host, entry.ipc)

    def connect(
        self, peer: Peer, address: str, host: str = "127.0.0.1", ipc: str | None = None
    ) -> None:
        self.peers[peer] = address
        self.hosts[peer] = host
        if ipc:
            self.ipc[peer] = ipc

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
        large ones in the arena on this host, frames elsewhere). Raises `TransportError` when the
        peer's queue stays full."""
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
        window after the last activity (`Tuning.busy_poll_us`; 0: never)."""
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

    def poll(self, timeout_ms: float) -> list[Message]:
        """Messages that arrived within ``timeout_ms`` (all that are queued, at least one if any
        arrives in time); transport messages are handled here."""
        out: list[Message] = []
        if timeout_ms > 0 and not self.wait(self.poller, timeout_ms):
            return out
        self.take(out)
        return out

    def take(self, out: list[Message]) -> None:
        """Append every message queued in the inbox now to ``out`` (without waiting)."""
        inbox = self.inbox
        get = inbox.get
        secret = self.secret
        while get(_EVENTS) & _POLLIN:
            token = inbox.recv(_NOBLOCK)
            if not get(_RCVMORE) or not hmac.compare_digest(token, secret):
                while get(_RCVMORE):  # drop the rest of the message unread
                    inbox.recv(copy=False)
                self._unauthenticated()
                continue
            head = inbox.recv(_NOBLOCK)  # a copy: cheaper than a zmq.Frame for a header
            frames: list[Any] = [head]
            while get(_RCVMORE):  # tensor frames: zero-copy
                frames.append(inbox.recv(copy=False))
            try:
                batch = self._codec.decode(frames, self._resolve)
            except CodecError as exc:
                self._reject(exc)
                continue
            for msg in batch:
                if msg.__class__ is ArenaFree:
                    if self.arena is not None:
                        for off, gen in msg.blocks:
                            self.arena.release(off, gen)
                else:
                    out.append(msg)
        self._last_active = time.perf_counter()

    def _unauthenticated(self) -> None:
        self.unauthenticated += 1
        if self.unauthenticated <= REPORT_BAD_FRAMES:
            print(
                f"wgc: {_name(self.me)} dropped a message without the deployment's secret",
                file=sys.stderr,
                flush=True,
            )

    def _reject(self, exc: CodecError) -> None:
        self.rejected += 1
        if self.rejected <= REPORT_BAD_FRAMES:
            print(f"wgc: {_name(self.me)} dropped a frame: {exc}", file=sys.stderr, flush=True)

    def recv(self, timeout_s: float) -> Message | None:
        """One message within ``timeout_s`` (None if none arrived); the rest stay queued here."""
        deadline = time.monotonic() + timeout_s
        while not self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._pending.extend(self.poll(left * 1000))
        return self._pending.pop(0)

    def close(self) -> None:
        for sock in self._out.values():
            sock.close(0)
        self._out.clear()
        self.inbox.close(0)
        if self._ipc is not None:
            self._ipc.remove()


class ClientPort:
    """The conductor's socket for clients (``ROUTER``): messages carry the client's identity."""

    def __init__(self, bind: str = "127.0.0.1", ctx: zmq.Context | None = None) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        _tune(self.sock, send=True)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        port = self.sock.bind_to_random_port(f"tcp://{bind}")
        self.address = f"tcp://{bind}:{port}"
        self._codec = Codec(CLIENT_IN)
        self._out = Codec(CLIENT_OUT)
        self.rejected = 0

    def recv_all(self) -> list[tuple[bytes, Message]]:
        """Every client message queued now, with its client's identity (frames that do not
        decode as client messages are dropped)."""
        out = []
        sock = self.sock
        while sock.get(_EVENTS) & _POLLIN:  # no zmq.Again exception per call
            frames = sock.recv_multipart(_NOBLOCK, copy=False)
            ident = frames[0].bytes
            try:
                batch = self._codec.decode(frames[1:])
            except CodecError as exc:
                self.rejected += 1
                if self.rejected <= REPORT_BAD_FRAMES:
                    print(f"wgc: the client port dropped a frame: {exc}", file=sys.stderr)
                continue
            out.extend((ident, msg) for msg in batch)
        return out

    def send(self, ident: bytes, msgs: Sequence[Message]) -> bool:
        """False when the client is gone (its messages are dropped)."""
        try:
            self.sock.send_multipart([ident, *self._out.encode(list(msgs))], copy=False)
            return True
        except (zmq.Again, zmq.error.ZMQError):
            return False

    def close(self) -> None:
        self.sock.close(0)


def new_secret() -> bytes:
    """A fresh deployment secret (32 random bytes)."""
    return secrets.token_bytes(32)


class _IpcPath:
    """A filesystem ``ipc://`` socket for an inbox, in a private folder (mode 0700): the
    deployment's (``ipc_dir``, made by the launcher and removed by it), or one of its own. Other
    local users cannot connect to it (abstract sockets have no permissions at all)."""

    def __init__(self, me: Peer, ipc_dir: str | None) -> None:
        self.own_dir = ipc_dir is None
        self.dir = ipc_dir if ipc_dir is not None else tempfile.mkdtemp(prefix="wgc-ipc-")
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
            with contextlib.suppress(OSError):
                os.rmdir(self.dir)


def _file_name(peer: Peer) -> str:
    return f"rank{peer}" if isinstance(peer, int) else str(peer)


def _name(peer: Peer) -> str:
    return f"rank {peer}" if isinstance(peer, int) else str(peer)
