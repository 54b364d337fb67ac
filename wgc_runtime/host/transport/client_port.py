"""The conductor's port for clients (`ClientPort`, a ``ROUTER`` socket): clients are not part of
the deployment, so it accepts client messages only (`Submit`, `Cancel`, `Ping`, `GetStats`),
needs the deployment's *client* key when CURVE is on, cuts off a client (by its routing id) that
keeps sending garbage, and knows when a client has gone (a send to it fails; ZMTP heartbeats
find a client whose host vanished), so the conductor can cancel what it left.
"""

from __future__ import annotations

from collections.abc import Sequence

import zmq

from wgc_runtime.contract.control import CLIENT_IN, CLIENT_OUT
from wgc_runtime.contract.messages import Message
from wgc_runtime.host.transport.endpoints import EVENTS, NOBLOCK, POLLIN, default_codec, tune
from wgc_runtime.host.transport.guard import PeerGuard
from wgc_runtime.host.transport.keys import CLIENT_DOMAIN, Keys

HEARTBEAT_MS = 2000  # ZMTP pings on the client port: a client whose host vanished is dropped
HEARTBEAT_TIMEOUT_MS = 6000
CLIENT_FRAME_BYTES = 256 << 20


class ClientPort:
    """The conductor's socket for clients (``ROUTER``): messages carry the client's identity.

    ``keys``: the deployment's CURVE keys (clients then need its client key)."""

    def __init__(
        self, bind: str = "127.0.0.1", ctx: zmq.Context | None = None, keys: Keys | None = None
    ) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        tune(self.sock, send=True)
        # a client's frame past this is never received (libzmq drops the connection unread)
        self.sock.setsockopt(zmq.MAXMSGSIZE, CLIENT_FRAME_BYTES)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a client that left fails
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_MS)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        if keys is not None:
            keys.serve(self.sock, CLIENT_DOMAIN)
        port = self.sock.bind_to_random_port(f"tcp://{bind}")
        self.address = f"tcp://{bind}:{port}"
        self._codec = default_codec(CLIENT_IN)
        self._out = default_codec(CLIENT_OUT)
        self.rejected = 0
        self.ignored = 0  # frames from cut-off clients, dropped unread
        self.guard = PeerGuard("the client port")

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
