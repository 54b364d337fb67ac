"""The conductor's port for clients (`ClientPort`, a ``ROUTER`` socket): clients are not part of
the deployment, so it accepts client messages only (`Submit`, `Cancel`, `Ping`, `GetStats`),
cuts off a client (by its routing id) that keeps sending garbage, and knows when a client has
gone (a send to it fails; ZMTP heartbeats find a client whose host vanished), so the conductor
can cancel what it left.

**No stranger gets a byte read.** The port is never open to whoever can reach it (issue 33: an
unauthenticated local peer could make libzmq's I/O thread read and buffer a 1 GiB message,
~1 s of the conductor's CPU). It is either

* an ``ipc://`` socket in the deployment's private folder (mode 0700; ``ipc_path``): the
  kernel refuses ``connect`` to any other user, before ZeroMQ sees the peer (a loopback
  deployment's default), or
* a TCP port with CURVE (``keys``): a peer without the deployment's client key is dropped in the
  ZMTP handshake, before any frame of a message is read (named hosts, ``listen``, or asked for:
  `wgc_runtime.host.processes.launcher.Cluster`'s ``client_port``).

An authenticated client's frame past ``frame_bytes`` (`frame_limit`: the door's own byte limit
when that is smaller than `CLIENT_FRAME_BYTES`) is dropped unread with its connection.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import zmq

from wgc_runtime.contract.control import CLIENT_IN, CLIENT_OUT
from wgc_runtime.contract.messages import Message
from wgc_runtime.host.transport.endpoints import EVENTS, NOBLOCK, POLLIN, default_codec, tune
from wgc_runtime.host.transport.guard import PeerGuard
from wgc_runtime.host.transport.keys import CLIENT_DOMAIN, Keys

HEARTBEAT_MS = 2000  # ZMTP pings on the client port: a client whose host vanished is dropped
HEARTBEAT_TIMEOUT_MS = 6000
CLIENT_FRAME_BYTES = 256 << 20
FRAME_HEADROOM = 1 << 20  # a message's header frames and a tensor's own header, past the body


CLIENT_PORTS = ("ipc", "curve")  # a loopback deployment's choices (`client_port_kind`)


def client_port_kind(asked: str | None) -> str:
    """What a loopback deployment's client port is: ``asked`` (`Cluster`'s ``client_port``), else
    ``$WGC_CLIENT_PORT``, else ``ipc``; a ValueError (WG894) for anything else."""
    kind = asked if asked is not None else (os.environ.get("WGC_CLIENT_PORT") or "ipc")
    if kind not in CLIENT_PORTS:
        source = "client_port" if asked is not None else "WGC_CLIENT_PORT"
        raise ValueError(
            f"WG894: {source} is `{kind}`: the client port is `ipc` (the deployment's private "
            "folder: its owner's processes only) or `curve` (a TCP port; clients need its key)"
        )
    return kind


def ipc_usable(path: str) -> bool:
    """Whether a client port can listen on ``ipc://path`` here (Unix sockets; a short path)."""
    return zmq.has("ipc") and not sys.platform.startswith("win") and len(path) <= 100


def frame_limit(door_bytes: int) -> int:
    """The port's ``MAXMSGSIZE`` for a door that admits ``door_bytes`` (the larger of one input
    file and one request body): no frame a request the door admits can need is refused."""
    return max(FRAME_HEADROOM, min(CLIENT_FRAME_BYTES, door_bytes + FRAME_HEADROOM))


class ClientPort:
    """The conductor's socket for clients (``ROUTER``): messages carry the client's identity.

    ``keys``: the deployment's CURVE keys (clients then need its client key); ``ipc_path``: bind
    ``ipc://`` there instead of a TCP port on ``bind`` (see the module docstring);
    ``frame_bytes``: the largest frame received (`frame_limit`)."""

    def __init__(
        self,
        bind: str = "127.0.0.1",
        ctx: zmq.Context | None = None,
        keys: Keys | None = None,
        *,
        ipc_path: str | None = None,
        frame_bytes: int = CLIENT_FRAME_BYTES,
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        tune(self.sock, send=True)
        # a client's frame past this is never received (libzmq drops the connection unread)
        self.sock.setsockopt(zmq.MAXMSGSIZE, frame_bytes)
        self.frame_bytes = frame_bytes
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a client that left fails
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_MS)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        if keys is not None:
            keys.serve(self.sock, CLIENT_DOMAIN)
        if ipc_path is not None:
            self.address = f"ipc://{ipc_path}"
            self.sock.bind(self.address)
        else:
            port = self.sock.bind_to_random_port(f"tcp://{bind}")
            self.address = f"tcp://{bind}:{port}"
        self._codec = default_codec(CLIENT_IN)
        self._out = default_codec(CLIENT_OUT)
        self.rejected = 0
        self.ignored = 0  # frames from cut-off clients, dropped unread
        self.guard = PeerGuard("the client port")

    @classmethod
    def of_boot(cls, boot: dict[str, Any]) -> ClientPort:
        """The conductor's port as the launcher decided it (the boot's ``client_port``: an ipc
        path, CURVE keys) with frames bounded by the door's limits (the boot config's)."""
        from wgc_runtime.host.inputs import Limits  # numpy: the conductor's, not the launcher's

        limits = Limits(**(boot.get("config") or {}).get("limits", {}))
        port = boot.get("client_port") or {}
        return cls(
            boot["bind"],
            keys=Keys.of_boot(port.get("keys")),
            ipc_path=port.get("ipc"),
            frame_bytes=frame_limit(max(limits.file_bytes, limits.request_bytes)),
        )

    def recv_all(self) -> list[tuple[bytes, Message]]:
        """Every client message queued now, with its client's identity (frames that do not
        decode as client messages are dropped; so is everything from a cut-off client)."""
        out = []
        sock = self.sock
        while sock.get(EVENTS) & POLLIN:  # no zmq.Again exception per call
            try:
                frames = sock.recv_multipart(NOBLOCK, copy=False)
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
