"""Direct outputs across processes (`wgc_runtime.contract.route`): a request's outputs go
from the rank that made them to the client, never through the conductor, and the client still
gets every one of them, in order, before the request ends; ``WGC_DIRECT_OUT=0`` relays them
through the conductor as before."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the faults model's nodes import from the project root
    sys.path.insert(0, str(ROOT))

from tests.narrow import present  # noqa: E402
from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_runtime.host.client import Client, RequestFailed  # noqa: E402
from wgc_runtime.host.processes.launcher import Cluster  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
]
FAULTS = ROOT / "tests" / "e2e" / "faults"
X = [("x", torch.zeros(4))]


@pytest.fixture(scope="module")
def faults_dir(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("faults")
    result = Driver().compile(
        str(FAULTS / "faults.walk"), str(FAULTS / "placements" / "cpu-2rank.yaml")
    )
    assert result.ok, [d.message for d in result.errors]
    sync(out, result.files, check=False)
    return str(out)


def _start(plan_dir: str, monkeypatch, direct_out: str) -> Cluster:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("WGC_DIRECT_OUT", direct_out)  # the children inherit it
    return Cluster(plan_dir, progress=None, ready_timeout=120).start()


@pytest.mark.parametrize("direct_out", ["1", "0"])
def test_a_loop_s_outputs_come_from_its_rank_and_all_arrive(
    faults_dir, monkeypatch, direct_out
) -> None:
    cluster = _start(faults_dir, monkeypatch, direct_out)
    try:
        with Client(present(cluster.client_address)) as client:
            for steps in (1, 40):
                outs = client.submit(X, ["tensor"], {"steps": steps}, deadline=60).collect()
                assert [o.iteration for o in outs] == [(i,) for i in range(steps)]
            # rank 1 emits every step: straight to the client, or (relayed) through the conductor
            assert client.from_ranks == (41 if direct_out == "1" else 0)
            # a cancel mid-loop still ends the request at once, whatever is in flight
            stream = client.submit(X, ["tensor"], {"steps": 1000, "delay_ms": 5}, deadline=30)
            it = iter(stream)
            next(it)
            stream.cancel()
            with pytest.raises(RequestFailed) as info:
                list(it)
            assert info.value.error.kind == "cancelled"
            # a request that fails on a rank ends with its error, outputs or not
            with pytest.raises(RequestFailed) as info:
                client.submit(X, ["tensor"], {"fail": True}, deadline=30).collect()
            assert info.value.error.kind == "node"
    finally:
        cluster.stop()
    assert os.environ.get("WGC_DIRECT_OUT") == direct_out


def test_the_gateway_gets_its_outputs_from_the_ranks_then_the_end(faults_dir, monkeypatch) -> None:
    import asyncio

    from wgc_runtime.contract import messages as m
    from wgc_runtime.host.server.gateway import Gateway

    cluster = _start(faults_dir, monkeypatch, "1")

    async def serve() -> list[m.Message]:
        gateway = Gateway(present(cluster.client_address))
        gateway.start()
        try:
            for _ in range(500):  # the handshake with every rank (`rank_links`)
                if gateway.links.ready:
                    break
                await asyncio.sleep(0.01)
            assert gateway.links.ready
            pending = gateway.submit("g1", X, ["tensor"], {"steps": 30})
            events = []
            while not events or not isinstance(events[-1], m.Finished):
                events.append(await asyncio.wait_for(pending.events.get(), 30))
            assert pending.direct and pending.received == 30
            return events
        finally:
            await gateway.close()

    try:
        events = asyncio.run(serve())
    finally:
        cluster.stop()
    *outs, end = events
    assert end.ok and end.outputs == 30  # pyright: ignore[reportAttributeAccessIssue]
    assert [o.iters for o in outs] == [(i,) for i in range(30)]  # pyright: ignore


def _slices(pid: int) -> int:
    """How many times the process's main thread was put on a CPU (``schedstat``'s third field)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[2])


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="needs Linux schedstat")
def test_an_idle_conductor_sleeps_until_something_is_due(faults_dir, monkeypatch) -> None:
    # it used to wake every 20 ms (and spin 50 µs after each look that found nothing), so a long
    # request cost it CPU in proportion to its length (issue 29: flat conductor CPU); now only
    # its deadlines' tick (`timers.tick_every`: 0.5 s by default) and the keep-alive wake it
    cluster = _start(faults_dir, monkeypatch, "1")
    try:
        with Client(present(cluster.client_address)) as client:
            client.submit(X, ["tensor"], {"steps": 1}, deadline=60).collect()
            pid = cluster.pids["conductor"]
            before = _slices(pid)
            stream = client.submit(X, ["tensor"], {"steps": 1, "delay_ms": 2000}, deadline=60)
            assert len(stream.collect()) == 1
            woke = _slices(pid) - before
    finally:
        cluster.stop()
    # a request's own messages, a keep-alive or two and up to five ticks; 100+ at 20 ms
    assert woke < 30, woke
