"""ZeroMQ wiring between the launcher, the conductor, the workers and clients.

Every runtime process binds one ``PULL`` socket, its *inbox*, and keeps one ``PUSH`` socket per
peer it sends to (created on first use). One-way messages everywhere keep the loops simple: a
process never waits for a reply on a socket, it polls its inbox with a deadline. Peers are named
``"launcher"``, ``"conductor"`` and rank numbers; the launcher tells every process the address
table (`Mesh.set_peers`). Clients talk to the conductor over a separate ``ROUTER`` socket
(`ClientPort`), so a reply finds the client that asked.

Sockets bind to ``127.0.0.1`` unless the placement names hosts (then to the process's host).

**How a tensor travels** (`Mesh.send`), by where the receiver is:

* same process (same rank): the caller hands it over by reference; nothing reaches this module;
* another process on this host: written once into the host's shared-memory arena, only its
  descriptor crosses the socket (small tensors and a full arena fall back to inline frames);
* another host: zero-copy ZeroMQ frames (``copy=False`` views of the tensor's memory).

Transport messages (``t`` starting with ``"x."``: arena releases) are handled here and never
reach the cores. A send never blocks forever: every socket has a send timeout and a full queue to
a peer raises `TransportError`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

import zmq

from wgc_runtime.transport.arena import Arena
from wgc_runtime.transport.codec import decode, encode

LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}
SEND_TIMEOUT_MS = 5000
HWM = 100_000
ARENA_FREE = "x.arena_free"

Peer = int | str  # a rank, "conductor" or "launcher"


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
    `set_peers`).
    """

    def __init__(
        self,
        me: Peer,
        host: str = "127.0.0.1",
        bind: str = "127.0.0.1",
        arena: Arena | None = None,
        ctx: zmq.Context | None = None,
    ) -> None:
        self.me = me
        self.host = host
        self.arena = arena
        self.ctx = ctx or zmq.Context.instance()
        self.inbox = self.ctx.socket(zmq.PULL)
        _tune(self.inbox, send=False)
        port = self.inbox.bind_to_random_port(f"tcp://{bind}")
        self.address = f"tcp://{bind if bind != '0.0.0.0' else host}:{port}"
        self.peers: dict[Peer, str] = {}
        self.hosts: dict[Peer, str] = {}
        self._out: dict[Peer, zmq.Socket] = {}
        self.poller = zmq.Poller()
        self.poller.register(self.inbox, zmq.POLLIN)
        self.sent = 0
        self.received = 0
        self._pending: list[dict[str, Any]] = []

    # -------------------------------------------------------------- wiring

    def set_peers(self, table: dict[Any, list[str] | tuple[str, str]]) -> None:
        """``{peer: (address, host)}``; peer keys arrive as strings over msgpack."""
        for key, (address, host) in table.items():
            peer = _peer(key)
            self.peers[peer] = address
            self.hosts[peer] = host

    def connect(self, peer: Peer, address: str, host: str = "127.0.0.1") -> None:
        self.peers[peer] = address
        self.hosts[peer] = host

    def _socket(self, peer: Peer) -> zmq.Socket:
        sock = self._out.get(peer)
        if sock is None:
            try:
                address = self.peers[peer]
            except KeyError:
                raise TransportError(f"{self.me}: no address for peer {peer!r}") from None
            sock = self.ctx.socket(zmq.PUSH)
            _tune(sock, send=True)
            sock.connect(address)
            self._out[peer] = sock
        return sock

    # -------------------------------------------------------------- sending

    def same_host(self, peer: Peer) -> bool:
        return self.hosts.get(peer, self.host) == self.host

    def send(self, peer: Peer, msg: dict[str, Any]) -> None:
        """Encode ``msg`` for ``peer``: tensors through the arena on this host, inline frames to
        another host. Raises `TransportError` when the peer's queue stays full."""
        place = self.arena.put if self.arena is not None and self.same_host(peer) else None
        frames = encode(msg, place)
        try:
            self._socket(peer).send_multipart(frames, copy=False)
        except zmq.Again:
            raise TransportError(
                f"{_name(self.me)} could not send to {_name(peer)} for "
                f"{SEND_TIMEOUT_MS / 1000:.0f} s (is it alive?)"
            ) from None
        self.sent += 1

    def flush_releases(self) -> None:
        """Tell owners which arena blocks this process is done with."""
        if self.arena is None:
            return
        for slot, blocks in self.arena.drain_released().items():
            if slot == self.arena.slot:
                for off, gen in blocks:
                    self.arena.release(off, gen)
            else:
                owner: Peer = "conductor" if slot == self.arena.slots - 1 else slot
                # an owner that is gone takes its region with it
                with contextlib.suppress(TransportError):
                    self.send(owner, {"t": ARENA_FREE, "blocks": blocks})

    # -------------------------------------------------------------- receiving

    def poll(self, timeout_ms: float) -> list[dict[str, Any]]:
        """Messages that arrived within ``timeout_ms`` (all that are queued, at least one if any
        arrives in time); transport messages are handled here."""
        out: list[dict[str, Any]] = []
        if not self.poller.poll(max(0, int(timeout_ms))):
            return out
        while True:
            try:
                frames = self.inbox.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self.received += 1
            msg = decode(frames, self.arena.view if self.arena is not None else None)
            if msg.get("t") == ARENA_FREE:
                if self.arena is not None:
                    for off, gen in msg["blocks"]:
                        self.arena.release(off, gen)
                continue
            out.append(msg)
        return out

    def recv(self, timeout_s: float) -> dict[str, Any] | None:
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


class ClientPort:
    """The conductor's socket for clients (``ROUTER``): messages carry the client's identity."""

    def __init__(self, bind: str = "127.0.0.1", ctx: zmq.Context | None = None) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        _tune(self.sock, send=True)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        port = self.sock.bind_to_random_port(f"tcp://{bind}")
        self.address = f"tcp://{bind}:{port}"

    def recv_all(self) -> list[tuple[bytes, dict[str, Any]]]:
        out = []
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return out
            ident = frames[0].bytes
            out.append((ident, decode(frames[1:])))

    def send(self, ident: bytes, msg: dict[str, Any]) -> bool:
        """False when the client is gone (its messages are dropped)."""
        try:
            self.sock.send_multipart([ident, *encode(msg)], copy=False)
            return True
        except (zmq.Again, zmq.error.ZMQError):
            return False

    def close(self) -> None:
        self.sock.close(0)


def _peer(key: Any) -> Peer:
    if isinstance(key, int):
        return key
    return int(key) if str(key).lstrip("-").isdigit() else str(key)


def _name(peer: Peer) -> str:
    return f"rank {peer}" if isinstance(peer, int) else str(peer)
