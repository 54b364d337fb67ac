"""A small Python client for a conductor started with ``wgc run --serve``.

    from wgc_runtime.host.client import Client
    with Client("tcp://127.0.0.1:5555") as client:
        for out in client.submit([("text", "hello")], want=["audio"]):
            print(out.modality, out.value.shape)

`Client.submit` sends one request and returns a `Stream`: iterating it yields every `Output` as
the conductor emits it (per loop iteration inside loops) and ends when the request is done; a
failed request raises `RequestFailed` carrying the error (kind, message, node, walk, flow).
`Stream.cancel()` (or `Client.cancel(request_id)`) asks the conductor to release the request's
state on every rank.

**No request hangs silently.** The conductor sends a keep-alive for every live request about
once a second; a stream that hears nothing for ``idle_timeout`` seconds raises
`RequestTimeout` (the conductor is gone or wedged), and ``deadline`` (seconds, optional) bounds
the whole request: when it passes the client cancels the request and raises `RequestTimeout`.

Wire protocol (msgpack via `wgc_runtime.host.transport.codec`, tensors as frames) over a ``DEALER``
socket to the conductor's ``ROUTER``:

* client -> conductor: ``submit {rid, inputs: [{modality, data, fields}], want, options}``,
  ``cancel {rid}``, ``ping``;
* conductor -> client: ``accepted {rid, queued}``, ``output {rid, flow, walk, modality, channel,
  iteration, value}``, ``alive {rid}``, ``done {rid}``, ``error {rid, error}``, ``pong``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import zmq

from wgc_runtime.host.transport.codec import decode, encode

IDLE_TIMEOUT = 15.0


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
    kind: str
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None

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


def segment_wire(seg: Any) -> dict[str, Any]:
    """An input segment as sent: ``(modality, data)``, ``(modality, data, fields)``, a
    ``Segment`` or a dict. numpy arrays travel as tensors."""
    if isinstance(seg, Mapping):
        modality, data, fields = seg["modality"], seg.get("data"), dict(seg.get("fields", {}))
    elif hasattr(seg, "modality"):
        modality, data, fields = seg.modality, seg.data, dict(seg.fields)
    else:
        modality, data, *rest = seg
        fields = dict(rest[0]) if rest else {}
    return {
        "modality": modality,
        "data": _plain(data),
        "fields": {k: _plain(v) for k, v in fields.items()},
    }


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(v))
    return v


@dataclass
class Stream:
    """The outputs of one request, as they arrive (see the module docstring)."""

    client: Client
    rid: str
    deadline: float | None  # monotonic
    queued: bool = False
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
    """A connection to a conductor's client address (``tcp://host:port``)."""

    def __init__(self, address: str, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.address = address
        self.idle_timeout = idle_timeout
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDTIMEO, 5000)
        self.sock.setsockopt(zmq.IDENTITY, f"client-{os.getpid()}-{uuid.uuid4().hex[:8]}".encode())
        self.sock.connect(address)
        self.streams: dict[str, Stream] = {}
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
        self.sock.close(0)

    def ping(self, timeout: float = 5.0) -> bool:
        self._send({"t": "ping"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left_ms = int(max(1, (deadline - time.monotonic()) * 1000))
            if self.sock.poll(left_ms) and self._recv_one().get("t") == "pong":
                return True
        return False

    def submit(
        self,
        inputs: Iterable[Any],
        want: Iterable[str] = (),
        options: Mapping[str, Any] | None = None,
        deadline: float | None = None,
        request_id: str | None = None,
    ) -> Stream:
        """Send a request; iterate the returned `Stream` for its outputs. ``request_id``
        (default: a fresh one) must be unique among this conductor's live requests; nodes seed
        their randomness from it."""
        rid = request_id or f"{self._prefix}-{next(self._ids)}"
        msg = {
            "t": "submit",
            "rid": rid,
            "inputs": [segment_wire(s) for s in inputs],
            "want": sorted(set(want)),
            "options": {k: _plain(v) for k, v in (options or {}).items()},
        }
        stream = Stream(self, rid, None if deadline is None else time.monotonic() + deadline)
        self.streams[rid] = stream
        self._send(msg)
        return stream

    def cancel(self, rid: str) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._send({"t": "cancel", "rid": rid})

    def run(self, inputs, want=(), options=None, deadline=None) -> list[Output]:
        return self.submit(inputs, want, options, deadline).collect()

    # ---------------------------------------------------------------- receiving

    def _send(self, msg: dict[str, Any]) -> None:
        try:
            self.sock.send_multipart(encode(msg), copy=False)
        except zmq.Again:
            raise RequestFailed(
                ErrorInfo("timeout", f"cannot reach the conductor at {self.address}")
            ) from None

    def _recv_one(self) -> dict[str, Any]:
        return decode(self.sock.recv_multipart(copy=False))

    def _pump(self, waiting: Stream) -> None:
        """Receive until ``waiting`` has something new, within its deadlines."""
        idle_until = time.monotonic() + self.idle_timeout
        while not waiting._buffer and not waiting.done:
            now = time.monotonic()
            limit = idle_until if waiting.deadline is None else min(idle_until, waiting.deadline)
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
            if not self.sock.poll(int(max(1, (limit - now) * 1000))):
                continue
            msg = self._recv_one()
            stream = self.streams.get(msg.get("rid", ""))
            if stream is None:
                continue
            if stream is waiting:
                idle_until = time.monotonic() + self.idle_timeout
            self._handle(stream, msg)

    def _handle(self, stream: Stream, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        if kind == "output":
            stream._buffer.append(
                Output(
                    stream.rid,
                    msg.get("flow", ""),
                    msg.get("walk", ""),
                    msg.get("modality", ""),
                    msg.get("channel", ""),
                    msg.get("value"),
                    tuple(msg.get("iteration", ())),
                )
            )
        elif kind == "accepted":
            stream.queued = bool(msg.get("queued"))
        elif kind == "done":
            stream.done = True
        elif kind == "error":
            e = msg.get("error", {})
            stream.error = ErrorInfo(
                e.get("kind", "error"),
                e.get("message", "request failed"),
                e.get("flow"),
                e.get("walk"),
                e.get("node"),
            )
            stream.done = True
        if stream.done:
            self.streams.pop(stream.rid, None)
