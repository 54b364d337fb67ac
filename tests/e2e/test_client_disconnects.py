"""Disconnects free everything: 50 clients that go away mid-stream (40 `Client`s whose socket
closes without a word, 10 client processes killed with SIGKILL) leave no request running or
queued in the conductor, no KV page promised by admission nor held by any rank's pool, and a
short request afterwards runs in normal time.

On the failure-test model (a source on rank 0, a loop on rank 1 that appends one K/V token per
step to the runtime's paged pool; two requests run at once, the rest queue)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.e2e.runtime_support import ROOT, compile_faults, start, stop
from wgc_runtime.host.client import Client

X = [("x", torch.arange(4, dtype=torch.float32))]
# long enough that none ends while the test looks (two run at once: 100 s each)
SLOW = {"steps": 1000, "delay_ms": 100}

# a client process that submits a long request, says so, and waits to be killed (no torch:
# its replies are not decoded, only counted)
RAW_CLIENT = """
import sys, zmq
from wgc_runtime.contract import control as c
from wgc_runtime.host.transport.control_codec import ControlCodec
sock = zmq.Context.instance().socket(zmq.DEALER)
sock.connect(sys.argv[1])
submit = c.Submit(sys.argv[2], (c.InputSegment("x", [0.0, 1.0, 2.0, 3.0]),), ("tensor",),
                  {"steps": 1000, "delay_ms": 100})
sock.send_multipart(ControlCodec(c.CLIENT_IN).encode([submit]))
sock.recv_multipart()  # accepted (or its first output)
print("submitted", flush=True)
while True:  # keep reading (keep-alives) until killed: a process that ended would cancel
    sock.recv_multipart()
"""


def held(cluster) -> dict[str, tuple[int, tuple]]:
    return {who: (u.requests, u.kv_pages) for who, u in cluster.usage(10).items()}


def all_held(busy: dict[str, tuple[int, tuple]], n: int) -> bool:
    """The conductor holds ``n`` requests and rank 1's pool pages (the running loops')."""
    return busy["conductor"][0] == n and any(k for _, k in busy["rank 1"][1])


@pytest.mark.slow
def test_fifty_clients_that_go_away_leave_nothing_behind(tmp_path) -> None:
    cluster = start(compile_faults(tmp_path))
    try:
        assert cluster.client_address is not None
        with Client(cluster.client_address) as probe:
            t0 = time.monotonic()
            assert len(probe.run(X, ["tensor"], {"steps": 2}, deadline=60)) == 2
            normal = time.monotonic() - t0
        clients = [Client(cluster.client_address, idle_timeout=60) for _ in range(40)]
        for cl in clients:  # two run at once (whichever the conductor saw first), the rest queue
            cl.submit(X, ["tensor"], SLOW, deadline=600)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        raw = [
            subprocess.Popen(
                [sys.executable, "-c", RAW_CLIENT, cluster.client_address, f"raw-{i}"],
                stdout=subprocess.PIPE,
                env=env,
            )
            for i in range(10)
        ]
        for p in raw:
            assert p.stdout is not None and p.stdout.readline().strip() == b"submitted"
        # a Client's submit only queues its message: wait until the conductor has all 50 and
        # the running ones' loops hold pages on rank 1
        busy, until = held(cluster), time.monotonic() + 60
        while not all_held(busy, 50) and time.monotonic() < until:
            time.sleep(0.05)
            busy = held(cluster)
        assert busy["conductor"][0] == 50 and any(n for _, n in busy["conductor"][1]), busy
        assert any(n for _, n in busy["rank 1"][1]), busy  # pages in use on rank 1
        t1 = time.monotonic()
        for cl in clients:  # gone without a word: no cancel, the socket just closes
            cl.sock.close(0)
        for p in raw:
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        deadline = time.monotonic() + 30
        empty = {
            "conductor": (0, tuple((k, 0) for k, _ in busy["conductor"][1])),
            "rank 0": (0, busy["rank 0"][1]),
            "rank 1": (0, tuple((k, 0) for k, _ in busy["rank 1"][1])),
        }
        while held(cluster) != empty and time.monotonic() < deadline:
            time.sleep(0.1)
        assert held(cluster) == empty
        freed = time.monotonic() - t1
        with Client(cluster.client_address) as probe:
            t2 = time.monotonic()
            assert len(probe.run(X, ["tensor"], {"steps": 2}, deadline=60)) == 2
            quick = time.monotonic() - t2
        print(f"\n50 clients gone: all freed in {freed:.2f} s; next request {quick:.3f} s "
              f"(before: {normal:.3f} s)")  # fmt: skip
        assert quick < max(5.0, 10 * normal)
        assert cluster.failure is None
    finally:
        stop(cluster)
