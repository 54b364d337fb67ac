"""A small Python client for a conductor started with ``wgc serve`` (its client address).

    from wgc_runtime.host.client import Client
    with Client("ipc:///tmp/wgc-abc123/client.sock") as client:  # as `wgc serve` printed
        for out in client.submit([("text", "hello")], want=["audio"]):
            print(out.modality, out.value.shape)

`Client.submit` sends one request and returns a `Stream`: iterating it yields every `Output` as
the conductor emits it (per loop iteration inside loops) and ends when the request is done; a
failed request raises `RequestFailed` carrying the error (kind, message, node, walk, flow).
`Stream.cancel()` (or `Client.cancel(request_id)`) asks the conductor to release the request's
state on every rank.

**No request hangs silently.** The client watches its connection (a ZeroMQ socket monitor):
when the conductor's process goes away, every live request fails at once with a `RequestFailed`
saying so (kind ``internal``), and so does a conductor that refuses the connection (a CURVE
deployment, and no key or the wrong one); a request on a client whose conductor is not there
(nothing accepts the connection: it died before the client connected, or in between) fails
within ``CONNECT_TIMEOUT`` (1 s), not its idle timeout. The conductor also sends a keep-alive
for every live request about once a second; a stream that hears nothing for ``idle_timeout``
seconds raises `RequestTimeout` (the conductor is wedged, or unreachable), and ``deadline``
(seconds, optional) bounds the whole request: when it passes the client cancels the request and
raises `RequestTimeout`.

**Who may connect.** A loopback deployment's client address is an ``ipc://`` socket in its
private folder: processes of the user who started it connect with the address alone; another
user's are refused by the kernel (their requests fail within ``CONNECT_TIMEOUT``, WG893). A
client port with CURVE (hosts named, ``curve`` or ``client_port="curve"`` asked for,
``WGC_CLIENT_PORT=curve``) needs the deployment's client key:
``Client(address, key=ClientKey.load(path))`` (``wgc serve`` prints the path of the key file; a
path may be given instead of a `ClientKey`); without it, or with another, the handshake fails and
so do the requests, at once (WG893). **A client that goes away** (closed, garbage
collected, its process killed) has its unfinished requests cancelled by the conductor, which sees
the connection go; `close` also cancels them explicitly.

The client imports torch only when a tensor arrives or is sent (outputs are torch tensors).

Wire protocol: the typed client messages of `wgc_runtime.contract.control` (the one wire format,
`wgc_runtime.host.transport.codec`; tensors as frames) over a ``DEALER`` socket to the
conductor's ``ROUTER``: `Submit`, `Cancel`, `Ping` and `GetRoutes` out; `Accepted`, `Output`,
`Alive`, `Finished`, `Pong` and `Routes` in. A reply that does not decode is dropped.

**Outputs come from the ranks** once the client is connected to each (`rank_links`; the first
`submit` waits for that, up to ``CONNECT_TIMEOUT``); a request's `Finished` says how many, and
the stream ends once it has them all (waiting for late ones up to ``idle_timeout``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.host.client_types import (
    ErrorInfo,
    Output,
    RequestFailed,
    RequestTimeout,
    Stream,
    plain_value,
    segment_wire,
    unreachable,
)
from wgc_runtime.host.rank_links import RankLinks, missing
from wgc_runtime.host.transport.keys import ClientKey
from wgc_runtime.host.transport.sockets import MAX_FRAME_BYTES, watch

__all__ = [
    "Client",
    "ErrorInfo",
    "Output",
    "RequestFailed",
    "RequestTimeout",
    "Stream",
    "segment_wire",
    "unreachable",
]

IDLE_TIMEOUT = 15.0
# how long a request waits for a connection that was never made (or was lost) while the address
# refuses it: a conductor that is gone is said within this, not after `idle_timeout`
CONNECT_TIMEOUT = 1.0
_WATCHED = (
    zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class Client:
    """A connection to a conductor's client address (``ipc://path`` or ``tcp://host:port``)."""

    def __init__(
        self,
        address: str,
        idle_timeout: float = IDLE_TIMEOUT,
        key: ClientKey | str | os.PathLike | None = None,
    ) -> None:
        from wgc_runtime.host.transport.codec import Codec  # torch, once a client exists

        self.address = address
        self.idle_timeout = idle_timeout
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)  # the conductor's frames
        self.sock.setsockopt(zmq.SNDTIMEO, 5000)
        identity = f"client-{os.getpid()}-{uuid.uuid4().hex[:8]}".encode()
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self._keyed = key is not None
        ckey = None if key is None else key if isinstance(key, ClientKey) else ClientKey.load(key)
        if ckey is not None:
            ckey.apply(self.sock)
        self._links = RankLinks(self.ctx, identity, ckey)  # direct outputs (`rank_links`)
        self._direct: dict[int, Stream] = {}
        self.from_ranks = 0  # outputs that came straight from the ranks, so far
        self._failed: str | None = None  # the connection failed while a submit waited
        # connection events: a dropped connection means the conductor is gone; a failed
        # handshake, that it refuses this client (a CURVE deployment: no key, or another one)
        self._monitor = watch(self.sock, _WATCHED | zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED)
        self._connected = False  # until the monitor says so; again after a disconnect
        self._refused = False  # a connect attempt was refused since then (nothing listens)
        self._poller = zmq.Poller()
        self._poller.register(self.sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        self.sock.connect(address)
        self.streams: dict[str, Stream] = {}
        self._codec = Codec(c.CLIENT_OUT)
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self._links.asked = True
        self._send(c.GetRoutes())  # queued until connected

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for stream in self.streams.values():
            if not stream.done:
                self.cancel(stream.rid)
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self._monitor.close(0)
        self._links.close()
        self.sock.close(0)

    def submit(
        self,
        inputs: Iterable[Any],
        want: Iterable[str] = (),
        options: Mapping[str, Any] | None = None,
        deadline: float | None = None,
        request_id: str | None = None,
        seed: int | None = None,
        session: str | None = None,
    ) -> Stream:
        """Send a request; iterate the returned `Stream` for its outputs. ``request_id``
        (default: a fresh one) must be unique among this conductor's live requests (an ended
        request's id may be reused); nodes seed their randomness from ``seed``, else from the
        id; ``session``: the session whose KV it continues (the placement's ``sessions:``). A
        request the conductor refuses at the door raises `RequestFailed` with kind
        ``rejected`` and every problem in its message."""
        rid = request_id or f"{self._prefix}-{next(self._ids)}"
        now = time.monotonic()
        self._failed = None
        if self._links.waiting and not self._links.waited:  # the first request: connect first
            self._links.waited = True  # once: later ones go through the conductor meanwhile
            self._await_links(now + CONNECT_TIMEOUT)
        direct = self._links.number()
        msg = c.Submit(
            rid,
            tuple(segment_wire(s) for s in inputs),
            tuple(sorted(set(want))),
            {str(k): plain_value(v) for k, v in (options or {}).items()},
            seed,
            session=session,
            direct=direct,
        )
        # the connection's timeout counts from the send (the wait above saw no refusal)
        sent = time.monotonic()
        stream = Stream(self, rid, None if deadline is None else now + deadline, submitted=sent)
        stream.direct = direct
        stream.drops = self._links.drops
        self.streams[rid] = stream
        if direct:
            self._direct[direct] = stream
        if self._failed is not None:  # the connection failed while it waited for the ranks
            self._fail_all(self._failed)
            return stream  # nothing would take the request (a refused handshake is final)
        self._send(msg)
        return stream

    def cancel(self, rid: str) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._send(c.Cancel(rid))

    def run(self, inputs, want=(), options=None, deadline=None) -> list[Output]:
        return self.submit(inputs, want, options, deadline).collect()

    # ---------------------------------------------------------------- receiving

    def _send(self, msg: m.Message) -> None:
        try:
            self.sock.send_multipart(self._codec.encode([msg]), copy=False)
        except zmq.Again:
            raise RequestFailed(
                ErrorInfo("timeout", f"cannot reach the conductor at {self.address}")
            ) from None

    def _recv(self, sock: Any) -> list[m.Message]:
        try:
            return self._codec.decode(sock.recv_multipart(copy=False))
        except Exception:
            return []  # not a reply the protocol knows: dropped

    def _pump(self, waiting: Stream) -> None:
        """Receive until ``waiting`` has something new, within its deadlines."""
        idle_until = time.monotonic() + self.idle_timeout
        while not waiting._buffer and not waiting.done:
            now = time.monotonic()
            limit = idle_until if waiting.deadline is None else min(idle_until, waiting.deadline)
            loss, w = None, waiting
            if (expect := w.expect) is not None:  # finished: any lost with a rank? (`rank_links`)
                loss = self._links.loss(expect, w.received, w.drops, w.finished_at)
            if loss is not None:
                if now >= loss[0]:
                    lost = m.Finished(waiting.rid, False, FailKind.INTERNAL, loss[1])
                    self._handle(waiting, lost)
                    return
                limit = min(limit, loss[0])
            if not self._connected:
                connect_by = waiting.submitted + CONNECT_TIMEOUT
                if now >= connect_by and self._refused:
                    self._fail_all(unreachable(self.address))
                    return
                limit = min(limit, max(connect_by, now + 0.05))
            if now >= limit:
                if waiting.deadline is not None and now >= waiting.deadline:
                    self.cancel(waiting.rid)
                    why = "the request's deadline passed"
                elif waiting.expect is not None:
                    why = missing(waiting.expect, waiting.received, self.idle_timeout)
                else:
                    why = (
                        f"no word from the conductor at {self.address} for "
                        f"{self.idle_timeout:.0f} s"
                    )
                waiting.error = ErrorInfo("timeout", why)
                waiting.done = True
                return
            events = dict(self._poller.poll(int(max(1, (limit - now) * 1000))))
            if self._monitor in events:
                self._connection_event()
                continue
            self._links.on_events(events, recv_monitor_message)
            for stream, msg in self._incoming(events):
                if stream is waiting:
                    idle_until = time.monotonic() + self.idle_timeout
                self._handle(stream, msg)

    def _incoming(self, events: dict[Any, int]) -> list[tuple[Stream, m.Message]]:
        """Live requests' messages on the sockets ``events`` names; the handshake's its own."""
        msgs = self._recv(self.sock) if self.sock in events else []
        for sock in self._links.socks:
            if sock in events:
                for msg in self._recv(sock):
                    if isinstance(msg, c.Pong):
                        self._links.on_pong(sock)
                    else:
                        self.from_ranks += isinstance(msg, m.Output)
                        msgs.append(msg)
        out = []
        for msg in msgs:
            if isinstance(msg, c.Routes):
                for sock in self._links.on_routes(msg):
                    self._poller.register(sock, zmq.POLLIN)
                    sock.send_multipart(self._codec.encode([c.Ping()]), copy=False)
                for monitor in self._links.monitors:
                    self._poller.register(monitor, zmq.POLLIN)
                continue
            request = getattr(msg, "request", "")
            stream = self.streams.get(request)
            if stream is None and (where := m.route(request)) is not None:
                stream = self._direct.get(where[1])  # a rank's output of a routed request
            if stream is not None:
                out.append((stream, msg))
        return out

    def _await_links(self, until: float) -> None:
        """Wait (until ``until`` at most) for the ranks' answers (`rank_links`), handling what
        else arrives; not for a conductor that refuses the connection."""
        while self._links.waiting and not (self._refused and not self._connected):
            now = time.monotonic()
            if now >= until:
                return
            events = dict(self._poller.poll(int(max(1, min(until - now, 0.05) * 1000))))
            if self._monitor in events:
                self._failed = None
                self._connection_event()
                if self._failed is not None:
                    return  # the request being submitted fails with the rest (`submit`)
                continue
            self._links.on_events(events, recv_monitor_message)
            for stream, msg in self._incoming(events):
                self._handle(stream, msg)

    def _connection_event(self) -> None:
        event = recv_monitor_message(self._monitor)["event"]
        if event == zmq.EVENT_CONNECTED:
            self._connected, self._refused = True, False
            return
        if event == zmq.EVENT_CONNECT_RETRIED:
            self._refused = True
            return
        if event == zmq.EVENT_DISCONNECTED:
            self._connected = False
            why = (
                f"lost the connection to the conductor at {self.address}: it stopped or crashed, "
                "and the request cannot finish"
            )
        elif event & _WATCHED:
            why = (
                f"WG893: the conductor at {self.address} refused the connection (its client "
                "port uses CURVE: give the client key `wgc serve` printed, "
                f"`Client(address, key=PATH)`{'; this key is not its' if self._keyed else ''})"
            )
        else:
            return
        self._links.asked = False  # no routes come from a conductor that is gone or refuses
        self._failed = why  # for a request submitted while its first one waited for routes
        self._fail_all(why)

    def _fail_all(self, why: str) -> None:
        for stream in list(self.streams.values()):
            if not stream.done:
                stream.error = ErrorInfo("internal", why)
                stream.done = True
        self.streams.clear()

    def _handle(self, stream: Stream, msg: m.Message) -> None:
        if isinstance(msg, m.Output):
            stream._buffer.append(
                Output(
                    stream.rid,
                    msg.flow,
                    msg.walk,
                    msg.modality,
                    msg.channel,
                    msg.data,
                    tuple(msg.iters),
                )
            )
            if msg.counted:
                stream.received += 1
                stream.done = stream.expect is not None and stream.received >= stream.expect
        elif isinstance(msg, c.Accepted):
            stream.queued = msg.queued
        elif isinstance(msg, m.Finished):
            if not msg.ok:
                stream.error = ErrorInfo(
                    str(msg.kind or "error"),
                    msg.message or "request failed",
                    msg.flow,
                    msg.walk,
                    msg.node,
                    None if msg.cause is None else str(msg.cause),
                )
                stream.done = True
            else:  # done once every output the ranks sent it is here (other sockets)
                stream.expect = msg.outputs
                stream.finished_at = time.monotonic()
                stream.done = stream.received >= msg.outputs
        if stream.done:
            self.streams.pop(stream.rid, None)
            self._direct.pop(stream.direct, None)
