"""A CURVE peer that sends ZMTP heartbeats makes a socket's ``ZMQ_EVENTS`` say POLLIN with no
message to read: a rank's inbox (`Mesh.take`) and the conductor's client port
(`ClientPort.recv_all`) read on, instead of raising `zmq.Again` (which ended the process). The
inbox (PULL) showed it; the client port (ROUTER) did not here, and is guarded the same way."""

from __future__ import annotations

import time

import pytest
import zmq

from wgc_runtime.host.transport.keys import Authenticator, Keys
from wgc_runtime.host.transport.sockets import ClientPort, Mesh
from wgc_runtime.host.transport.tuning import Tuning


def heartbeating(ctx: zmq.Context, kind: int, key, address: str) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    key.apply(sock)
    sock.setsockopt(zmq.HEARTBEAT_IVL, 50)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 1000)
    sock.connect(address)
    return sock


@pytest.mark.parametrize("endpoint", ["inbox", "client port"])
def test_a_heartbeating_curve_peer_is_no_message(endpoint: str) -> None:
    ctx = zmq.Context()
    keys = Keys.generate()
    Authenticator.of(ctx, keys)
    closing: list = []
    try:
        if endpoint == "inbox":
            mesh = Mesh(0, ctx=ctx, keys=keys, tuning=Tuning(ipc=False), bind="127.0.0.1")
            closing.append(mesh.close)
            peer = heartbeating(ctx, zmq.PUSH, keys.peer, mesh.address)

            def receive() -> list:
                return mesh.poll(20)

        else:
            port = ClientPort(ctx=ctx, keys=keys)
            closing.append(port.close)
            peer = heartbeating(ctx, zmq.DEALER, keys.client, port.address)

            def receive() -> list:
                port.sock.poll(20)
                return port.recv_all()

        closing.append(lambda: peer.close(0))
        got: list = []
        until = time.monotonic() + 1.5  # ~30 heartbeats
        while time.monotonic() < until:
            got.extend(receive())
        assert got == []
    finally:
        for close in reversed(closing):
            close()
        Authenticator.release(ctx)
        ctx.term()
