"""A client's connections to every rank's client-out socket, for direct outputs.

A client (`wgc_runtime.host.client.Client`, the HTTP gateway) asks the conductor for the ranks'
client-out addresses (`GetRoutes`, answered by `Routes`), connects a ``DEALER`` with its own
identity (the one its conductor socket has) to each, and pings each: a `Pong` says that rank's
``ROUTER`` knows the identity, so it can route an output there. Once every rank answered, the
client's requests ask for direct outputs (`Submit.direct`, a number per request unique to the
client): their outputs then come from the ranks that made them (`contract.route`), and
`Finished.outputs` says how many to wait for. Until then, and for good when the conductor offers
no routes, outputs come through the conductor. A rank that restarts binds the same ``ipc``
address again and the socket reconnects by itself; an output a rank cannot deliver reaches the
client through the conductor, counted the same.

**An output lost with its rank.** A rank reports how many outputs it sent (to the conductor, on
the shared-memory ring) right after it hands them to ZeroMQ, whose I/O thread sends them a
moment later: a rank SIGKILLed in between loses outputs its count promises. So each rank socket
is watched (`watch`, ``EVENT_DISCONNECTED``): `dropped_since` says which ranks' connections
dropped after a request was sent, and a request that finished short of its outputs while one
did fails `LOST_GRACE_S` after both (time for outputs already on their way to arrive), naming
the rank (`lost`), instead of waiting for its idle timeout. A request that still held work on
the rank is failed by the conductor anyway (`wgc_runtime.host.processes.recovery`).

`RankLinks` makes the sockets in the client's ZeroMQ context (sync or asyncio) and keeps the
handshake's state; the client polls or reads them.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any

import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.host.transport.endpoints import watch
from wgc_runtime.host.transport.keys import ClientKey
from wgc_runtime.host.transport.sockets import MAX_FRAME_BYTES

RECONNECT_MS = 10  # a restarted rank's socket is back long before it is ready: reconnect soon
# a finished request short of outputs from a rank whose connection dropped waits this long after
# both for outputs already on their way, then fails (`lost`): they were sent before their count
# reached the conductor, so on one host they arrive within milliseconds of `Finished`
LOST_GRACE_S = 0.1


class RankLinks:
    """The sockets to the ranks and the handshake (see the module docstring)."""

    def __init__(self, ctx: zmq.Context[Any], identity: bytes, key: ClientKey | None) -> None:
        self.ctx = ctx
        self.identity = identity
        self.key = key
        self.socks: list[Any] = []
        self.asked = False  # `GetRoutes` sent, `Routes` not yet answered
        self.unanswered: set[int] = set()  # ranks whose `Pong` has not come yet
        self.waited = False  # a request waited for the handshake already (`Client.submit`)
        self.monitors: list[Any] = []  # per rank: its socket's disconnect events
        self.drops = 0  # connections to ranks that dropped so far (`dropped_since`)
        self._dropped: dict[int, tuple[int, float]] = {}  # rank -> (`drops` then, monotonic)
        self._numbers = itertools.count(1)

    @property
    def ready(self) -> bool:
        """Every rank answered: requests may ask for direct outputs."""
        return bool(self.socks) and not self.unanswered

    @property
    def waiting(self) -> bool:
        """The handshake is under way (routes asked, or some rank's answer due)."""
        return self.asked or bool(self.unanswered)

    def number(self) -> int:
        """``Submit.direct`` for the next request: its number when every rank answered, else 0
        (its outputs come through the conductor)."""
        return next(self._numbers) if self.ready else 0

    def on_routes(self, msg: c.Routes) -> list[Any]:
        """The conductor's answer: connect to every rank and ping it; the new sockets."""
        self.asked = False
        if self.socks or not msg.addresses:
            return []
        for rank, address in enumerate(msg.addresses):
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            sock.setsockopt(zmq.IDENTITY, self.identity)
            sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
            if self.key is not None:
                self.key.apply(sock)
            self.monitors.append(watch(sock, zmq.EVENT_DISCONNECTED))
            sock.connect(address)
            self.socks.append(sock)
            self.unanswered.add(rank)
        return list(self.socks)

    def on_dropped(self, monitor: Any, at: float) -> None:
        """``monitor`` said its rank's connection dropped (at monotonic ``at``): the rank
        stopped; what it had not sent yet is lost (see the module docstring)."""
        self.drops += 1
        self._dropped[self.monitors.index(monitor)] = (self.drops, at)

    def on_events(self, events: dict[Any, int], recv: Any) -> None:
        """Read the rank monitors ``events`` (a poll's) names (``recv``: pyzmq's
        ``recv_monitor_message``) and note each drop (`on_dropped`)."""
        for monitor in self.monitors:
            if monitor in events:
                with contextlib.suppress(zmq.ZMQError):
                    while True:
                        if recv(monitor, zmq.NOBLOCK)["event"] == zmq.EVENT_DISCONNECTED:
                            self.on_dropped(monitor, time.monotonic())

    def loss(
        self, expect: int, received: int, drops: int, finished_at: float
    ) -> tuple[float, str] | None:
        """For a request that finished (at monotonic ``finished_at``) short of its ``expect``
        outputs, sent when `drops` was ``drops``: None while no rank's connection dropped since,
        else when it fails (`lost_at`) and why (`lost`)."""
        gone = self.dropped_since(drops)
        if not gone:
            return None
        return lost_at(finished_at, gone), lost(expect, received, gone)

    def dropped_since(self, drops: int) -> dict[int, float]:
        """The ranks whose connection dropped after `drops` was ``drops``: rank -> when (the
        last time)."""
        if drops >= self.drops:
            return {}
        return {r: at for r, (n, at) in self._dropped.items() if n > drops}

    def on_pong(self, sock: Any) -> None:
        if sock in self.socks:
            self.unanswered.discard(self.socks.index(sock))

    def close(self) -> None:
        for sock in self.socks:
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            sock.close(0)
        for monitor in self.monitors:
            monitor.close(0)
        self.socks = []
        self.monitors = []
        self.unanswered.clear()


def missing(expect: int, received: int, waited_s: float) -> str:
    """Why a finished request failed: outputs `Finished.outputs` counts never came."""
    return (
        f"the request finished, but {expect - received} of its {expect} outputs did not come "
        f"from the ranks in {waited_s:.0f} s"
    )


def lost(expect: int, received: int, ranks: dict[int, float]) -> str:
    """Why a finished request failed: ranks whose connections dropped (`dropped_since`) took
    outputs `Finished.outputs` counts with them."""
    names = ", ".join(f"rank {r}" for r in sorted(ranks))
    return (
        f"the request finished, but {expect - received} of its {expect} outputs never reached "
        f"the client: {names} stopped (its connection dropped) before it sent them; they were "
        "lost with it"
    )


def lost_at(finished_at: float, ranks: dict[int, float]) -> float:
    """When a finished request short of outputs fails as `lost` (see `LOST_GRACE_S`)."""
    return max(finished_at, *ranks.values()) + LOST_GRACE_S
