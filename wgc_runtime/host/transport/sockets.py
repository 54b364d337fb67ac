"""ZeroMQ wiring between the launcher, the conductor, the workers and clients.

Every runtime process binds one ``PULL`` socket, its *inbox*, and keeps one ``PUSH`` socket per
peer it sends to (created on first use). One-way messages everywhere keep the loops simple: a
process never waits for a reply on a socket, it polls its inbox with a deadline. Peers are named
``"launcher"``, ``"conductor"`` and rank numbers; the launcher tells every process the address
table (`Mesh.set_peers`). Clients talk to the conductor over a separate ``ROUTER`` socket
(`ClientPort`), so a reply finds the client that asked.

**Where sockets listen** (`bind_address`): on ``127.0.0.1`` when no host is named, and then a
process's inbox listens *only* on a filesystem ``ipc://`` socket in a private folder (mode 0700: the
launcher's, removed when the run ends), which no other user can open, and so does the conductor's
client port (or, asked for, a TCP port with CURVE: `ClientPort`). When the placement names hosts,
every socket listens on its own host's address (resolved to an interface address; never every
interface unless asked with ``listen``), peers on the same host still connect over ``ipc://`` (Unix
domain sockets skip the TCP stack), peers on other hosts over TCP, and the deployment's ZeroMQ CURVE
keys (`wgc_runtime.host.transport.keys`) encrypt and authenticate every connection: a peer without
the deployment's keys cannot finish the handshake. `Tuning.ipc` off (``WGC_IPC=0``) makes loopback
inboxes listen on TCP again.

**Only the deployment steers the deployment.** Every message a mesh sends starts with the
deployment's secret (32 random bytes the launcher hands its children when it spawns them, never over
a socket); an inbox drops, counts and reports any message without it, so a process that can reach a
TCP port (any local user, anyone on the network when hosts are named) can neither stop the run nor
inject data. Clients are not part of the deployment: the conductor's client port (`ClientPort`)
accepts client messages only (`Submit`, `Cancel`, `Ping`, `GetStats`), from its owner's processes
(``ipc://``) or holders of the deployment's *client* key (CURVE), cuts off a client (by its routing
id) that keeps sending garbage, and knows when a client has gone (a send to it fails:
`ClientPort.send`; ZMTP heartbeats find a client whose host vanished), so the conductor can cancel
what it left.

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

Where it lives: `Mesh` here (its wiring and sending; its receiving half is `receiving`), how a
socket is made in `endpoints`, the client port in `client_port`. The names this module had
before it was split import from here as before.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import zmq

from wgc_runtime.contract.control import INBOX, ArenaFree, PeerEntry
from wgc_runtime.contract.messages import Message
from wgc_runtime.host.transport.client_port import (
    CLIENT_FRAME_BYTES,
    HEARTBEAT_MS,
    HEARTBEAT_TIMEOUT_MS,
    ClientPort,
    client_name,
)
from wgc_runtime.host.transport.endpoints import (
    HWM,
    LOOPBACK,
    MAX_FRAME_BYTES,
    NOBLOCK,
    POLLIN,
    SEND_TIMEOUT_MS,
    WILDCARD,
    FrameCodec,
    IpcPath,
    Peer,
    TransportError,
    bind_address,
    default_codec,
    is_loopback,
    named_hosts,
    new_secret,
    peer_label,
    tune,
    watch,
)
from wgc_runtime.host.transport.guard import PeerGuard
from wgc_runtime.host.transport.keys import INBOX_DOMAIN, Keys
from wgc_runtime.host.transport.receiving import INBOX_EVERY_S, RECUT_S, RINGS, Receiving
from wgc_runtime.host.transport.ring import RingFull
from wgc_runtime.host.transport.tuning import TUNING, Tuning

if TYPE_CHECKING:
    from wgc_runtime.host.transport.arena import Arena
    from wgc_runtime.host.transport.ring import Rings

__all__ = [
    "CLIENT_FRAME_BYTES",
    "HEARTBEAT_MS",
    "HEARTBEAT_TIMEOUT_MS",
    "HWM",
    "INBOX_EVERY_S",
    "LOOPBACK",
    "MAX_FRAME_BYTES",
    "RECUT_S",
    "RINGS",
    "SEND_TIMEOUT_MS",
    "WILDCARD",
    "ClientPort",
    "FrameCodec",
    "Mesh",
    "Peer",
    "TransportError",
    "bind_address",
    "client_name",
    "is_loopback",
    "named_hosts",
    "new_secret",
    "watch",
]


class Mesh(Receiving):
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
        tune(self.inbox, send=False)
        if keys is not None:
            keys.serve(self.inbox, INBOX_DOMAIN)
        self._ipc = IpcPath(me, ipc_dir) if self.tuning.ipc else None
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
        self.poller.register(self.inbox, POLLIN)
        self.rejected = 0  # frames with the secret that did not decode (dropped)
        self.unauthenticated = 0  # messages without the deployment's secret (dropped)
        self.guard = PeerGuard(peer_label(me))
        self._recut: dict[str, float] = {}  # cut-off peer -> when its connections were last cut
        self._pending: list[Message] = []
        self._codec = codec or default_codec(INBOX)
        self._resolve = arena.view if arena is not None else None
        self._last_active = 0.0  # perf_counter of the last send or receive (busy-poll window)
        # same-host peers with a ring (`wgc_runtime.host.transport.ring`): peer -> its slot
        self.rings: Rings | None = None
        self._ring_slot: dict[Peer, int] = {}
        self._ring_only = False  # every data peer (ranks, conductor) is on a ring
        self._inbox_at = 0.0  # perf_counter of the last look at the inbox (`take`)

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
        self.poller.register(rings.bell, POLLIN)
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
        poller.register(self.inbox, POLLIN)
        if self.rings is not None:
            poller.register(self.rings.bell, POLLIN)

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
            tune(sock, send=True)
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
                who = f"{peer_label(self.me)} could not send to {peer_label(peer)}"
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
                    sock.send(frames[0], NOBLOCK)
                else:
                    sock.send_multipart(frames, NOBLOCK, copy=False)
            except zmq.Again:  # the peer's queue is full: wait (bounded by SNDTIMEO)
                sock.send_multipart(frames, copy=False)
        except zmq.Again:
            raise TransportError(
                f"{peer_label(self.me)} could not send to {peer_label(peer)} for "
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
