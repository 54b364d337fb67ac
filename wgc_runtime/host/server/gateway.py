"""The server's connection to the conductor: one asyncio ``DEALER`` socket for every request.

The same client protocol as `wgc_runtime.host.client` (`Submit`, `Cancel`, `Ping`, `GetStats`,
`GetSessions` out; `Accepted`, `Output`, `Alive`, `Finished`, `Pong`, `Stats`, `WalkTrace`,
`SessionList` in), multiplexed: a reader task hands each message to the `Pending` of its
request (an `asyncio.Queue` the request's handler reads) or to whoever waits for a `Pong` /
`Stats` / `SessionList`. When the connection drops
(the conductor died) every pending request finishes with an ``internal`` error at once.
`cancel` never awaits, so a handler can call it while it is being cancelled itself (a client
that disconnected).

**Outputs from the ranks.** Like the Python client, the gateway connects to every rank's
client-out socket (`wgc_runtime.host.rank_links`: asked at `start`, a reader task per rank) and,
once every rank answered, asks for its requests' outputs directly (`Submit.direct`); a request's
`Finished` reaches its `Pending` only after every output it counts (`Finished.outputs`), so a
handler sees all outputs, then the end. Requests submitted before the handshake completed get
their outputs through the conductor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.host.client import segment_wire
from wgc_runtime.host.rank_links import RankLinks
from wgc_runtime.host.transport.codec import Codec
from wgc_runtime.host.transport.keys import ClientKey
from wgc_runtime.host.transport.sockets import MAX_FRAME_BYTES, watch


@dataclass(eq=False)
class Pending:
    """One request's messages from the conductor, in order; ``last_heard``: monotonic time of
    the last message (an `Alive` counts)."""

    rid: str
    events: asyncio.Queue[m.Message] = field(default_factory=asyncio.Queue)
    queued: bool = False
    finished: m.Finished | None = None
    last_heard: float = field(default_factory=time.monotonic)
    direct: int = 0  # its number for direct outputs (`rank_links`); 0: through the conductor
    received: int = 0  # outputs the ranks sent it directly, so far
    held: m.Finished | None = None  # its `Finished`, until every output it counts is here
    held_at: float = 0.0  # monotonic: when ``held`` came
    drops: int = 0  # `RankLinks.drops` when it was sent (`RankLinks.loss`)


class Gateway:
    """The connection (see the module docstring)."""

    def __init__(self, address: str, key: ClientKey | None = None) -> None:
        self.address = address
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)  # the conductor's frames
        identity = f"http-{os.getpid()}-{uuid.uuid4().hex[:8]}".encode()
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.links = RankLinks(self.ctx, identity, key)
        self.by_number: dict[int, Pending] = {}  # requests with direct outputs
        if key is not None:  # a CURVE deployment: the server connects with its client key
            key.apply(self.sock)
        self._monitor = watch(self.sock, zmq.EVENT_DISCONNECTED)
        self.sock.connect(address)
        self.codec = Codec(c.CLIENT_OUT)
        self.pending: dict[str, Pending] = {}
        self.lost: str | None = None  # why the conductor is unreachable
        self._pongs: list[asyncio.Future[None]] = []
        self._stats: list[asyncio.Future[c.Stats]] = []
        self._sessions: list[asyncio.Future[c.SessionList]] = []  # in the order asked
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start reading (call from the event loop that will use the gateway)."""
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._watch())]
        self.links.asked = True
        self._send(c.GetRoutes())

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(BaseException):
                await t
        self.links.close()
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self._monitor.close(0)
        self.sock.close(0)
        self.ctx.term()

    # ---------------------------------------------------------------- out

    def submit(
        self,
        rid: str,
        inputs: Iterable[Any],
        want: Iterable[str],
        options: Mapping[str, Any],
        seed: int | None = None,
        trace: bool = False,
        session: str | None = None,
    ) -> Pending:
        pending = self.pending[rid] = Pending(rid)
        if self.lost is not None:
            self._finish(pending, FailKind.INTERNAL, self.lost)
            return pending
        pending.direct = 0 if trace else self.links.number()  # traced: through the conductor
        if pending.direct:
            self.by_number[pending.direct] = pending
            pending.drops = self.links.drops
        msg = c.Submit(
            rid,
            tuple(segment_wire(s) for s in inputs),
            tuple(sorted(set(want))),
            dict(options),
            seed,
            trace,
            session,
            pending.direct,
        )
        self._send(msg)
        return pending

    def cancel(self, rid: str) -> None:
        if rid in self.pending and self.lost is None:
            self._send(c.Cancel(rid))

    async def ping(self, timeout: float = 2.0) -> bool:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(fut)
        self._send(c.Ping())
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False

    async def sessions(self, drop: str | None = None, timeout: float = 2.0) -> c.SessionList:
        """The conductor's sessions (`GetSessions`), forgetting ``drop`` first; raises
        `TimeoutError` when it does not answer."""
        fut: asyncio.Future[c.SessionList] = asyncio.get_running_loop().create_future()
        self._sessions.append(fut)
        self._send(c.GetSessions(drop))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            if fut in self._sessions:
                self._sessions.remove(fut)

    async def stats(self, timeout: float = 2.0) -> c.Stats | None:
        fut: asyncio.Future[c.Stats] = asyncio.get_running_loop().create_future()
        self._stats.append(fut)
        self._send(c.GetStats())
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None

    def _send(self, msg: m.Message) -> None:
        sent = self.sock.send_multipart(self.codec.encode([msg]), copy=False)
        if isinstance(sent, asyncio.Future):  # may complete later: never leave an error unread
            sent.add_done_callback(lambda f: f.cancelled() or f.exception())

    # ---------------------------------------------------------------- in

    async def _read(self) -> None:
        while True:
            frames = await self.sock.recv_multipart(copy=False)
            try:
                msgs = self.codec.decode(frames)
            except Exception:  # not a reply the protocol knows: dropped, the reader goes on
                continue
            for msg in msgs:
                self._dispatch(msg)

    def _dispatch(self, msg: m.Message) -> None:
        if isinstance(msg, c.Pong):
            for fut in self._pongs:
                if not fut.done():
                    fut.set_result(None)
            self._pongs.clear()
            return
        if isinstance(msg, c.Stats):
            for fut in self._stats:
                if not fut.done():
                    fut.set_result(msg)
            self._stats.clear()
            return
        if isinstance(msg, c.SessionList):
            if self._sessions:
                fut = self._sessions.pop(0)
                if not fut.done():
                    fut.set_result(msg)
            return
        if isinstance(msg, c.Routes):
            new = self.links.on_routes(msg)  # none when connected already
            for sock in new:
                self._tasks.append(asyncio.ensure_future(self._read_rank(sock)))
            for monitor in self.links.monitors[len(self.links.monitors) - len(new) :]:
                self._tasks.append(asyncio.ensure_future(self._watch_rank(monitor)))
            return
        request = getattr(msg, "request", "")
        pending = self.pending.get(request)
        if pending is None and (where := m.route(request)) is not None:
            pending = self.by_number.get(where[1])  # a rank's output of a routed request
        if pending is None:
            return
        pending.last_heard = time.monotonic()
        if isinstance(msg, c.Accepted):
            pending.queued = msg.queued
        elif isinstance(msg, m.Finished):
            if msg.ok and pending.received < msg.outputs:
                pending.held = msg  # outputs still on their way from the ranks
                pending.held_at = time.monotonic()
                self._judge(pending)
            else:
                self._end(pending, msg)
        elif isinstance(msg, m.Output | c.WalkTrace):
            pending.events.put_nowait(msg)
            if isinstance(msg, m.Output) and msg.counted:
                pending.received += 1
                if pending.held is not None and pending.received >= pending.held.outputs:
                    self._end(pending, pending.held)

    def _end(self, pending: Pending, msg: m.Finished) -> None:
        pending.finished = msg
        self.pending.pop(pending.rid, None)
        self.by_number.pop(pending.direct, None)
        pending.events.put_nowait(msg)

    async def _read_rank(self, sock: Any) -> None:
        """One rank's client-out socket: its `Pong`, then routed requests' outputs."""
        await sock.send_multipart(self.codec.encode([c.Ping()]), copy=False)
        while True:
            frames = await sock.recv_multipart(copy=False)
            try:
                msgs = self.codec.decode(frames)
            except Exception:  # not a message the protocol knows: dropped
                continue
            for msg in msgs:
                if isinstance(msg, c.Pong):
                    self.links.on_pong(sock)
                elif isinstance(msg, m.Output):
                    self._dispatch(msg)

    async def _watch_rank(self, monitor: Any) -> None:
        """A rank's connection dropped: requests held short of its outputs may have lost them
        (`rank_links`, "An output lost with its rank")."""
        while True:
            frames = await monitor.recv_multipart()
            if parse_monitor_message(frames)["event"] != zmq.EVENT_DISCONNECTED:
                continue
            self.links.on_dropped(monitor, time.monotonic())
            for pending in list(self.by_number.values()):
                if pending.held is not None:
                    self._judge(pending)

    def _judge(self, pending: Pending) -> None:
        """Fail ``pending`` (held short of outputs) as `lost` once a rank's connection dropped
        after it was sent and `rank_links.LOST_GRACE_S` passed; else look again then."""
        held = pending.held
        if held is None or pending.finished is not None:
            return
        loss = self.links.loss(held.outputs, pending.received, pending.drops, pending.held_at)
        if loss is None:
            return
        wait = loss[0] - time.monotonic()
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self._judge, pending)
            return
        self._finish(pending, FailKind.INTERNAL, loss[1])

    async def _watch(self) -> None:
        """The conductor's process is gone when the connection drops: fail everything."""
        while True:
            frames = await self._monitor.recv_multipart()
            if parse_monitor_message(frames)["event"] != zmq.EVENT_DISCONNECTED:
                continue
            self.lost = (
                f"lost the connection to the conductor at {self.address}: it stopped or "
                "crashed, and the request cannot finish"
            )
            for pending in list(self.pending.values()):
                self._finish(pending, FailKind.INTERNAL, self.lost)

    def _finish(self, pending: Pending, kind: FailKind, message: str) -> None:
        self._end(pending, m.Finished(pending.rid, False, kind, message))
