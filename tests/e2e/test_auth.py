"""Authenticated transport: with hosts named (two "machines" on this one, ``127.0.0.2`` and
``127.0.0.3``) every socket is a CURVE server with the deployment's fresh keys: a client without
the client key, or with another key, is refused during the handshake (its request fails at once,
saying why) and a client with it is served; a process that knows the deployment's secret but not
its keys cannot deliver a single frame to a rank's inbox. Sockets listen on the named hosts only,
on loopback when no host is named, and on every interface only when asked (``listen``).

A loopback deployment's client port is an ``ipc://`` socket in its private folder, or, asked for
(``client_port="curve"``), a loopback TCP port with CURVE while the inboxes stay plain ipc
sockets: strangers of every size are refused in the handshake at ~0 conductor CPU
(`port_probes.curve_probes`), and a frame past the door's byte limit is dropped unread.

On the failure-test model (a source on rank 0, a loop on rank 1)."""

from __future__ import annotations

import contextlib
import os
import stat

import pytest
import torch
import zmq
from zmq.utils.monitor import recv_monitor_message

from tests.e2e.port_probes import curve_probes, holder_probes, run_all
from tests.e2e.runtime_support import TWO_RANKS, compile_faults, listening, start, stop
from tests.narrow import present
from wgc_runtime.contract import control as c
from wgc_runtime.host.client import Client, RequestFailed
from wgc_runtime.host.transport.client_port import frame_limit
from wgc_runtime.host.transport.control_codec import ControlCodec
from wgc_runtime.host.transport.keys import Authenticator, ClientKey

X = [("x", torch.arange(4, dtype=torch.float32))]
EXPECTED = [((torch.arange(4.0) + 1) * 2 * 2**i).tolist() for i in range(3)]
NAMED = TWO_RANKS + "hosts: {0: 127.0.0.2, 1: 127.0.0.3}\n"


FAILED_HANDSHAKE = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def attack(address: str, key: ClientKey | None, frames: list) -> int:
    """Push ``frames`` 20 times at an inbox (as a CURVE client with ``key``, or a plain one);
    the first connection event that is not a connect (the refusal, or 0 after 30 s)."""
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    if key is not None:
        key.apply(sock)
    monitor = sock.get_monitor_socket()
    sock.connect(address)
    for _ in range(20):
        with contextlib.suppress(zmq.Again):
            sock.send_multipart(frames, zmq.NOBLOCK)
    event = 0
    try:
        while monitor.poll(30_000):
            event = recv_monitor_message(monitor)["event"]
            if event & FAILED_HANDSHAKE or event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                break
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)
    return event


def served(client: Client) -> list[list[float]]:
    return [
        present(o.value).tolist() for o in client.run(X, ["tensor"], {"steps": 3}, deadline=120)
    ]


def refused(client: Client) -> str:
    with pytest.raises(RequestFailed) as info:
        client.run(X, ["tensor"], {"steps": 3}, deadline=120)
    return info.value.error.message


@pytest.mark.slow
def test_named_hosts_need_the_deployments_keys(tmp_path) -> None:
    cluster = start(compile_faults(tmp_path, NAMED))
    try:
        assert cluster.keys is not None and cluster.client_key is not None
        address = cluster.client_address
        assert address is not None and address.startswith("tcp://127.0.0.2:")
        # no key, and a key of the right server but not of this deployment: refused
        with Client(address, idle_timeout=60) as plain:
            assert "refused the connection" in refused(plain)
        public, secret = (k.decode() for k in zmq.curve_keypair())
        stranger = ClientKey(cluster.keys.server_public, public, secret)
        with Client(address, idle_timeout=60, key=stranger) as other:
            assert "refused the connection" in refused(other)
        # the client key, from the file `wgc serve` writes (its owner alone may read it)
        path = cluster.client_key.save(tmp_path / "client.key")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with Client(address, key=path) as client:
            assert served(client) == EXPECTED
        # the secret without the keys: a well-formed `Shutdown` never reaches rank 1's inbox
        rank1 = cluster.table["rank 1"].address
        assert rank1.startswith("tcp://127.0.0.3:")
        assert cluster.mesh is not None and cluster.mesh.address.startswith("tcp://127.0.0.2:")
        shutdown = [cluster.secret, *ControlCodec(c.INBOX).encode([c.Shutdown()])]
        for target in (rank1, cluster.mesh.address):  # the launcher's counts refusals here
            for key in (None, stranger):  # not CURVE at all; CURVE with a stranger's key
                assert attack(target, key, shutdown) & FAILED_HANDSHAKE
        with Client(address, key=cluster.client_key) as client:
            assert served(client) == EXPECTED  # after the attempt
        assert all(child.exitcode is None for child in cluster.procs.values())
        assert cluster.usage(10)["rank 1"].dropped == 0  # nothing was even delivered
        assert cluster.mesh.guard.dropped == 0
        assert Authenticator.refused_in(cluster.mesh.ctx) >= 1
        # every socket listens on its own host's address, none on every interface
        for who, pid in cluster.pids.items():
            hosts = {h for h, _ in listening(pid)}
            assert hosts <= {"127.0.0.2", "127.0.0.3"} and hosts, (who, hosts)
        assert {h for h, _ in listening(cluster.pids["rank 1"])} == {"127.0.0.3"}
    finally:
        stop(cluster)


@pytest.mark.slow
def test_loopback_without_hosts_and_every_interface_only_when_asked(tmp_path) -> None:
    plan = compile_faults(tmp_path)
    cluster = start(plan)
    try:
        assert cluster.keys is None and cluster.client_key is None
        # no TCP port at all: inboxes and the client port are ipc sockets in the private folder
        ports = {who: listening(pid) for who, pid in cluster.pids.items()}
        assert not any(ports.values()), ports
        folder = present(cluster.ipc_dir)
        assert cluster.client_address == f"ipc://{folder}/client.sock"
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # its owner's processes alone
        with Client(present(cluster.client_address)) as client:
            assert served(client) == EXPECTED
    finally:
        stop(cluster)
    cluster = start(plan, listen="0.0.0.0")  # CURVE with it: no unauthenticated wildcard
    try:
        assert cluster.client_key is not None
        ports = {who: listening(pid) for who, pid in cluster.pids.items()}
        assert {h for p in ports.values() for h, _ in p} == {"0.0.0.0"}, ports
        with Client(present(cluster.client_address), key=cluster.client_key) as client:
            assert served(client) == EXPECTED
    finally:
        stop(cluster)


@pytest.mark.slow
def test_a_loopback_curve_client_port_refuses_strangers_before_reading(tmp_path) -> None:
    door = 16 << 20  # `file_bytes` and `request_bytes`: the port's frame cap is 17 MiB
    limits = {"file_bytes": door, "request_bytes": door}
    cluster = start(compile_faults(tmp_path), client_port="curve", config={"limits": limits})
    try:
        assert cluster.keys is None  # the inboxes: plain ipc sockets
        key, address = cluster.client_key, present(cluster.client_address)
        assert key is not None and address.startswith("tcp://127.0.0.1:")
        with Client(address, idle_timeout=60) as plain:
            message = refused(plain)
            assert message.startswith("WG893: ") and "refused the connection" in message
        with Client(address, key=key) as client:
            assert served(client) == EXPECTED
        pid = cluster.pids["conductor"]
        costs = list(run_all(pid, curve_probes(address, key, frame_limit(door))))
        costs += run_all(pid, holder_probes(address, key, frame_limit(door)), settle=5.0)
        for cost in costs:
            print(f"  {cost.name:<36} x{cost.probes:<3} {cost.cpu_ms:7.1f} ms CPU")
        strangers = [c for c in costs if not c.name.startswith("key holder")]
        assert len(strangers) == 8 and max(c.cpu_ms for c in strangers) < 100, costs
        past = next(c for c in costs if c.name == "key holder, a frame past the cap")
        assert past.cpu_ms < 100, past
        with Client(address, key=key) as client:
            assert served(client) == EXPECTED  # after all of it
        assert all(child.exitcode is None for child in cluster.procs.values())
    finally:
        stop(cluster)
