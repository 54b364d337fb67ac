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

`RankLinks` makes the sockets in the client's ZeroMQ context (sync or asyncio) and keeps the
handshake's state; the client polls or reads them.
"""

from __future__ import annotations

import itertools
from typing import Any

import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.host.transport.keys import ClientKey
from wgc_runtime.host.transport.sockets import MAX_FRAME_BYTES

RECONNECT_MS = 10  # a restarted rank's socket is back long before it is ready: reconnect soon


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
            sock.connect(address)
            self.socks.append(sock)
            self.unanswered.add(rank)
        return list(self.socks)

    def on_pong(self, sock: Any) -> None:
        if sock in self.socks:
            self.unanswered.discard(self.socks.index(sock))

    def close(self) -> None:
        for sock in self.socks:
            sock.close(0)
        self.socks = []
        self.unanswered.clear()


def missing(expect: int, received: int, waited_s: float) -> str:
    """Why a finished request failed: outputs `Finished.outputs` counts never came."""
    return (
        f"the request finished, but {expect - received} of its {expect} outputs did not come "
        f"from the ranks in {waited_s:.0f} s"
    )
