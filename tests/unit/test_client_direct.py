"""The client's side of direct outputs (`wgc_runtime.host.rank_links`): a fake conductor and a fake
rank (two `ClientPort`s in a thread) play the protocol, so the order of what arrives is the
test's: the client connects to the rank before its first request, asks for direct outputs, and
ends a request only once every output `Finished.outputs` counts is there, whichever socket was
faster; and when the rank's connection drops short of them (it died with outputs still in its
ZeroMQ queue), the request fails naming the rank within `LOST_GRACE_S`, not its idle timeout."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from pathlib import Path

import pytest

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.host.client import Client, RequestFailed, RequestTimeout
from wgc_runtime.host.rank_links import LOST_GRACE_S
from wgc_runtime.host.transport.client_port import ClientPort


class FakeDeployment:
    """A conductor port and one rank's client-out port; ``lag_s``: how long after the request's
    `Finished` the rank sends its ``outputs`` outputs (``sent``: how many it really sends);
    ``die``: then the rank's socket closes, as a SIGKILLed rank's does (its connection drops)."""

    def __init__(
        self, folder: str, outputs: int, sent: int, lag_s: float, die: bool = False
    ) -> None:
        self.conductor = ClientPort(ipc_path=str(Path(folder) / "c.sock"))
        self.rank = ClientPort(ipc_path=str(Path(folder) / "r0.sock"))
        self.outputs, self.sent, self.lag_s, self.die = outputs, sent, lag_s, die
        self.died_at: float | None = None
        self.submits: list[c.Submit] = []
        self.pinged = False
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        due: list[tuple[float, bytes, c.Submit]] = []
        while not self.stop:
            for ident, msg in self.conductor.recv_all():
                if isinstance(msg, c.GetRoutes):
                    self.conductor.send(ident, [c.Routes((self.rank.address,))])
                elif isinstance(msg, c.Submit):
                    self.submits.append(msg)
                    # the count overtakes the outputs: they travel on the rank's socket
                    done = m.Finished(msg.request, True, outputs=self.outputs)
                    self.conductor.send(ident, [done])
                    due.append((time.monotonic() + self.lag_s, ident, msg))
            for ident, msg in self.rank.recv_all():
                if isinstance(msg, c.Ping):
                    self.pinged = True
                    self.rank.send(ident, [c.Pong()])
            now = time.monotonic()
            for item in [d for d in due if d[0] <= now]:
                due.remove(item)
                _, ident, sub = item
                rid = m.routed_id(sub.request, sub.direct, ident.decode())
                outs = [
                    m.Output(rid, "run", "main", "tensor", "y", (i,), i, True)
                    for i in range(self.sent)
                ]
                self.rank.send(ident, outs)
                if self.die:
                    time.sleep(0.05)  # what it sent is delivered; what it did not is lost
                    self.rank.close()
                    self.died_at = time.monotonic()
                    self.die = False
                    return self._idle()
            time.sleep(0.002)

    def _idle(self) -> None:
        """The conductor goes on without the dead rank (it answers nothing more here)."""
        while not self.stop:
            self.conductor.recv_all()
            time.sleep(0.002)

    def close(self) -> None:
        self.stop = True
        self.thread.join(2)
        self.conductor.close()
        if self.died_at is None:
            self.rank.close()


@pytest.fixture
def folder():
    with tempfile.TemporaryDirectory(prefix="wgc-direct-") as d:
        yield d


def test_a_finished_that_overtakes_its_outputs_waits_for_them(folder) -> None:
    fake = FakeDeployment(folder, outputs=3, sent=3, lag_s=0.3)
    try:
        with Client(fake.conductor.address, idle_timeout=5) as client:
            outs = client.submit([("x", 1)], ["tensor"]).collect()
            assert [o.iteration for o in outs] == [(0,), (1,), (2,)]
            assert client.from_ranks == 3
            assert fake.pinged and fake.submits[0].direct == 1  # connected before it asked
            again = client.submit([("x", 1)], ["tensor"]).collect()  # numbered per request
            assert len(again) == 3 and fake.submits[1].direct == 2
    finally:
        fake.close()


def test_outputs_that_never_come_fail_the_request_saying_so(folder) -> None:
    fake = FakeDeployment(folder, outputs=2, sent=1, lag_s=0.0)
    try:
        with Client(fake.conductor.address, idle_timeout=0.5) as client:
            stream = client.submit([("x", 1)], ["tensor"])
            t0 = time.monotonic()
            with pytest.raises(RequestTimeout, match="1 of its 2 outputs did not come"):
                stream.collect()
            assert time.monotonic() - t0 < 3
    finally:
        fake.close()


def test_outputs_lost_with_their_rank_fail_the_request_naming_it_at_once(folder) -> None:
    fake = FakeDeployment(folder, outputs=3, sent=1, lag_s=0.1, die=True)
    try:
        with Client(fake.conductor.address, idle_timeout=30) as client:
            stream = client.submit([("x", 1)], ["tensor"])
            got = []
            with pytest.raises(RequestFailed, match=r"2 of its 3 outputs never reached .*rank 0"):
                for out in stream:
                    got.append(out.value)
            assert got == [0]  # what the rank sent before it died still arrived
            assert fake.died_at is not None
            assert time.monotonic() - fake.died_at < LOST_GRACE_S + 1  # not the idle timeout
    finally:
        fake.close()


def test_a_rank_that_dies_after_sending_everything_costs_its_requests_nothing(folder) -> None:
    fake = FakeDeployment(folder, outputs=2, sent=2, lag_s=0.1, die=True)
    try:
        with Client(fake.conductor.address, idle_timeout=30) as client:
            assert [o.value for o in client.submit([("x", 1)], ["tensor"])] == [0, 1]
    finally:
        fake.close()


def test_the_gateway_fails_a_request_whose_outputs_died_with_their_rank(folder) -> None:
    from wgc_runtime.host.server.gateway import Gateway

    fake = FakeDeployment(folder, outputs=3, sent=1, lag_s=0.1, die=True)

    async def serve() -> list[m.Message]:
        gateway = Gateway(fake.conductor.address)
        gateway.start()
        try:
            for _ in range(500):
                if gateway.links.ready:
                    break
                await asyncio.sleep(0.01)
            assert gateway.links.ready
            pending = gateway.submit("g1", [("x", 1)], ["tensor"], {})
            events = []
            while not events or not isinstance(events[-1], m.Finished):
                events.append(await asyncio.wait_for(pending.events.get(), 10))
            return events
        finally:
            await gateway.close()

    try:
        *outs, end = asyncio.run(serve())
    finally:
        fake.close()
    assert [o.data for o in outs] == [0]  # pyright: ignore[reportAttributeAccessIssue]
    assert isinstance(end, m.Finished) and not end.ok
    assert end.message is not None and "rank 0 stopped" in end.message


def test_a_conductor_without_routes_keeps_outputs_on_its_own_socket(folder) -> None:
    port = ClientPort(ipc_path=str(Path(folder) / "c.sock"))
    got: list[c.Submit] = []

    def serve() -> None:
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end and not got:
            for ident, msg in port.recv_all():
                if isinstance(msg, c.GetRoutes):
                    port.send(ident, [c.Routes(())])
                elif isinstance(msg, c.Submit):
                    got.append(msg)
                    out = m.Output(msg.request, "run", "main", "tensor", "y", (), 7)
                    port.send(ident, [out, m.Finished(msg.request, True)])
            time.sleep(0.002)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with Client(port.address, idle_timeout=5) as client:
            (out,) = client.submit([("x", 1)], ["tensor"]).collect()
            assert out.value == 7 and got[0].direct == 0 and client.from_ranks == 0
    finally:
        thread.join(5)
        port.close()


def test_a_routed_id_names_its_client_and_its_number_and_nodes_never_see_it() -> None:
    rid = m.routed_id("req~3", 12, "client-1-ab")
    assert m.route(rid) == (b"client-1-ab", 12)
    assert m.base_id(rid) == "req~3" and m.base_id("plain") == "plain"
    assert m.route("plain") is None
    assert m.routable(b"client-1-ab") and not m.routable(b"\xff\x00") and not m.routable(b"")


def test_only_the_conductor_makes_a_routed_id() -> None:
    from wgc_runtime.host.admission import RequestIds

    ids = RequestIds()
    sneaky = ids.open(m.routed_id("x", 1, "client-9-ff"))  # a client's own id that looks routed
    assert m.route(sneaky) is None and ids.client(sneaky) == m.routed_id("x", 1, "client-9-ff")
    routed = ids.open("y", (4, "client-1-ab"))
    assert m.route(routed) == (b"client-1-ab", 4) and ids.client(routed) == "y"
    ids.close(routed)
    again = ids.open("y", (5, "client-1-ab"))  # a reused id runs under a fresh base
    assert m.base_id(again) != m.base_id(routed) and ids.client(again) == "y"
