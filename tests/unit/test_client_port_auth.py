"""The conductor's client port is never open to strangers (issue 33): an ``ipc://`` socket in a
private folder, or a TCP port with CURVE whose handshake refuses a client without the key (a
`Client` then fails at once with WG893, not after its idle timeout); its frame cap follows the
door's byte limits; the kind is `ipc` or `curve` (WG894 otherwise). In-process sockets only."""

from __future__ import annotations

import os
import stat
import time

import pytest
import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.host.client import Client, RequestFailed, unreachable
from wgc_runtime.host.inputs import Limits
from wgc_runtime.host.scratch import private_dir
from wgc_runtime.host.transport.client_port import (
    CLIENT_FRAME_BYTES,
    FRAME_HEADROOM,
    ClientPort,
    client_port_kind,
    frame_limit,
)
from wgc_runtime.host.transport.codec import Codec
from wgc_runtime.host.transport.keys import Authenticator, ClientKey, Keys

PING = Codec(c.CLIENT_IN).encode([c.Ping()])


def _received(port: ClientPort, seconds: float = 3.0) -> list:
    end = time.monotonic() + seconds
    got: list = []
    while not got and time.monotonic() < end:
        got = port.recv_all()
        time.sleep(0.02)
    return got


def _dealer(ctx: zmq.Context, address: str, key: ClientKey | None = None) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if key is not None:
        key.apply(sock)
    sock.connect(address)
    return sock


def test_the_kind_is_ipc_unless_curve_is_asked(monkeypatch) -> None:
    monkeypatch.delenv("WGC_CLIENT_PORT", raising=False)
    assert client_port_kind(None) == "ipc"
    monkeypatch.setenv("WGC_CLIENT_PORT", "curve")
    assert client_port_kind(None) == "curve"
    assert client_port_kind("ipc") == "ipc"  # the argument wins
    monkeypatch.setenv("WGC_CLIENT_PORT", "tcp")
    with pytest.raises(ValueError, match=r"WG894: WGC_CLIENT_PORT is `tcp`"):
        client_port_kind(None)
    with pytest.raises(ValueError, match=r"WG894: client_port is `open`"):
        client_port_kind("open")


def test_the_frame_cap_is_the_doors_when_that_is_smaller() -> None:
    door = Limits()
    assert frame_limit(max(door.file_bytes, door.request_bytes)) == CLIENT_FRAME_BYTES
    assert frame_limit(16 << 20) == (16 << 20) + FRAME_HEADROOM
    assert frame_limit(0) == FRAME_HEADROOM
    small = {"config": {"limits": {"file_bytes": 2 << 20, "request_bytes": 1 << 20}}}
    port = ClientPort.of_boot({**small, "bind": "127.0.0.1"})
    try:
        assert port.frame_bytes == (2 << 20) + FRAME_HEADROOM
        assert port.sock.getsockopt(zmq.MAXMSGSIZE) == port.frame_bytes
    finally:
        port.close()


def test_an_ipc_port_lives_in_a_private_folder_and_drops_a_frame_past_its_cap() -> None:
    folder = private_dir("wgc-test-")
    ctx = zmq.Context()
    path = os.path.join(folder, "client.sock")
    port = ClientPort.of_boot({"bind": "127.0.0.1", "client_port": {"ipc": path}})
    try:
        assert port.address == f"ipc://{path}"
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        big = ClientPort(ctx=ctx, ipc_path=os.path.join(folder, "small.sock"), frame_bytes=4096)
        try:
            over = _dealer(ctx, big.address)
            over.send_multipart([b"\x01" * 8192])  # past the cap: dropped with the connection
            assert _received(big, 1.0) == []
            under = _dealer(ctx, big.address)
            under.send_multipart(PING)
            assert [type(m) for _, m in _received(big)] == [c.Ping]
            over.close(0)
            under.close(0)
        finally:
            big.close()
        owner = _dealer(ctx, port.address)
        owner.send_multipart(PING)
        assert [type(m) for _, m in _received(port)] == [c.Ping]
        owner.close(0)
    finally:
        port.close()
        ctx.term()
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


def test_a_curve_port_takes_the_key_holder_and_refuses_others_with_wg893() -> None:
    keys = Keys.generate()
    ctx = zmq.Context()
    port = ClientPort(ctx=ctx, keys=keys)
    try:
        assert port.address.startswith("tcp://127.0.0.1:")
        holder = _dealer(ctx, port.address, keys.client)
        holder.send_multipart(PING)
        assert [type(m) for _, m in _received(port)] == [c.Ping]
        holder.close(0)
        public, secret = (k.decode() for k in zmq.curve_keypair())
        stranger = ClientKey(keys.server_public, public, secret)
        for key, words in ((None, "give the client key"), (stranger, "this key is not its")):
            t0 = time.monotonic()
            with (
                Client(port.address, idle_timeout=30, key=key) as client,
                pytest.raises(RequestFailed) as info,
            ):
                client.submit([("text", "hi")], ["text"], deadline=30).collect()
            message = info.value.error.message
            assert message.startswith("WG893: ") and words in message, message
            assert time.monotonic() - t0 < 10  # at the handshake, not the idle timeout
        assert _received(port, 0.3) == []  # nothing of theirs was delivered
        assert Authenticator.refused_in(ctx) >= 1
    finally:
        port.close()
        Authenticator.release(ctx)
        ctx.term()


def test_an_ipc_port_in_a_folder_the_client_may_not_open_is_named(monkeypatch, tmp_path) -> None:
    address = f"ipc://{tmp_path}/client.sock"
    assert unreachable(address).startswith("cannot reach the conductor")
    monkeypatch.setattr(os, "access", lambda *_a, **_k: False)  # as another user sees it
    said = unreachable(address)
    assert said.startswith("WG893: ") and "private folder" in said and "WGC_CLIENT_PORT" in said
