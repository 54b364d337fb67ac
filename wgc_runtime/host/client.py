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
conductor's ``ROUTER``: `Submit`, `Cancel` and `Ping` out; `Accepted`, `Output`, `Alive`,
`Finished` and `Pong` in. A reply that does not decode is dropped.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.host.transport.keys import ClientKey
from wgc_runtime.host.transport.sockets import MAX_FRAME_BYTES, watch

if TYPE_CHECKING:
    import torch

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


@dataclass(frozen=True, slots=True)
class Output:
    """One emitted value: ``iteration`` has one entry per loop around the `emit`."""

    request: str
    flow: str
    walk: str
    modality: str
    channel: str
    value: torch.Tensor | None
    iteration: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a request failed: a `FailKind`, the message, where; ``cause``: for a node's failure,
    ``input`` (the node refused a value of the request) or ``internal``."""

    kind: str
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    cause: str | None = None

    def __str__(self) -> str:
        where = ", ".join(
            f"{k} `{v}`"
            for k, v in (("node", self.node), ("walk", self.walk), ("flow", self.flow))
            if v
        )
        return f"{self.message} ({where})" if where and "`" not in self.message else self.message


class RequestFailed(RuntimeError):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(str(error))
        self.error = error


class RequestTimeout(RequestFailed):
    pass


def segment_wire(seg: Any) -> c.InputSegment:
    """An input segment as sent: ``(modality, data)``, ``(modality, data, fields)``, a
    ``Segment`` or a dict. numpy arrays travel as tensors."""
    if isinstance(seg, Mapping):
        modality, data, fields = seg["modality"], seg.get("data"), dict(seg.get("fields", {}))
    elif hasattr(seg, "modality"):
        modality, data, fields = seg.modality, seg.data, dict(seg.fields)
    else:
        modality, data, *rest = seg
        fields = dict(rest[0]) if rest else {}
    return c.InputSegment(
        str(modality), _plain(data), {str(k): _plain(v) for k, v in fields.items()}
    )


def _plain(v: Any) -> Any:
    if type(v).__module__ == "numpy" and hasattr(v, "dtype"):  # an array: sent as a tensor
        import numpy as np
        import torch

        return torch.from_numpy(np.ascontiguousarray(v))
    return v


@dataclass
class Stream:
    """The outputs of one request, as they arrive (see the module docstring)."""

    client: Client
    rid: str
    deadline: float | None  # monotonic
    queued: bool = False
    submitted: float = 0.0  # monotonic
    done: bool = False
    error: ErrorInfo | None = None
    _buffer: list[Output] = field(default_factory=list)

    def __iter__(self) -> Iterator[Output]:
        while True:
            while self._buffer:
                yield self._buffer.pop(0)
            if self.done:
                if self.error is not None:
                    raise (RequestTimeout if self.error.kind == "timeout" else RequestFailed)(
                        self.error
                    )
                return
            self.client._pump(self)

    def collect(self) -> list[Output]:
        return list(self)

    def cancel(self) -> None:
        self.client.cancel(self.rid)


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
        self.sock.setsockopt(zmq.IDENTITY, f"client-{os.getpid()}-{uuid.uuid4().hex[:8]}".encode())
        self._keyed = key is not None
        if key is not None:
            (key if isinstance(key, ClientKey) else ClientKey.load(key)).apply(self.sock)
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
        msg = c.Submit(
            rid,
            tuple(segment_wire(s) for s in inputs),
            tuple(sorted(set(want))),
            {str(k): _plain(v) for k, v in (options or {}).items()},
            seed,
            session=session,
        )
        now = time.monotonic()
        stream = Stream(self, rid, None if deadline is None else now + deadline, submitted=now)
        self.streams[rid] = stream
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

    def _recv(self) -> list[m.Message]:
        try:
            return self._codec.decode(self.sock.recv_multipart(copy=False))
        except Exception:
            return []  # not a reply the protocol knows: dropped

    def _pump(self, waiting: Stream) -> None:
        """Receive until ``waiting`` has something new, within its deadlines."""
        idle_until = time.monotonic() + self.idle_timeout
        while not waiting._buffer and not waiting.done:
            now = time.monotonic()
            limit = idle_until if waiting.deadline is None else min(idle_until, waiting.deadline)
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
            if self.sock not in events:
                continue
            for msg in self._recv():
                stream = self.streams.get(getattr(msg, "request", ""))
                if stream is None:
                    continue
                if stream is waiting:
                    idle_until = time.monotonic() + self.idle_timeout
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
        if stream.done:
            self.streams.pop(stream.rid, None)


def unreachable(address: str) -> str:
    """Why nothing accepts a connection to ``address``: an ``ipc://`` port another user's
    private folder hides (WG893), or no conductor there."""
    folder = os.path.dirname(address.removeprefix("ipc://"))
    if address.startswith("ipc://") and os.path.isdir(folder) and not os.access(folder, os.X_OK):
        return (
            f"WG893: cannot reach the conductor at {address}: its client port is in the "
            "deployment's private folder, which only the user who started it may open (run "
            "the client as that user, or start the deployment with `WGC_CLIENT_PORT=curve` and "
            "give the client its key)"
        )
    return (
        f"cannot reach the conductor at {address}: nothing accepts the connection there (it "
        "stopped or crashed, or the address is wrong)"
    )
