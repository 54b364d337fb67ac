"""Slow and hostile connections: a header read timeout and a connection cap, below the app.

uvicorn bounds the size of a request head (h11's incomplete-event limit) and the idle time
between requests (``timeout_keep_alive``), but not the time a client may take to send its head,
nor how many connections it may hold: a client that opens connections and never finishes them
would hold every file descriptor, and then every request times out. `GuardedH11` is uvicorn's
h11 protocol with both:

* **a connection cap** (`Guard.max_connections`, never more than the process's open-file limit
  less `FD_RESERVE`): a connection past it is answered at once, before anything is read, with
  503 and an OpenAI error body (``code`` ``too_many_connections``, ``Retry-After: 1``), then
  closed, so its descriptor is free again;
* **a header timeout** (`Guard.header_timeout_s`): a connection whose request head has not
  arrived that long after it opened (or after its previous response) is answered 408 and
  closed.

The body's own timeout is `body_limits.BodyLimits`'s (it reads every body first).
"""

from __future__ import annotations

import asyncio
import json
import resource
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

FD_RESERVE = 64  # descriptors kept for the rest of the process (ZeroMQ, files, logs)


@dataclass(frozen=True, slots=True)
class Guard:
    """How long a client may take, and how many connections it may hold (see the module)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0  # no byte of the body for this long: 408
    max_connections: int = 1000

    def connection_cap(self) -> int:
        """`max_connections`, within the open-file limit less `FD_RESERVE`."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - FD_RESERVE))


def refusal(status: int, reason: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response with an OpenAI error body, closing the connection."""
    body = json.dumps(
        {"error": {"message": message, "type": "server_error" if status >= 500 else
                   "invalid_request_error", "code": code, "param": None}}
    ).encode()  # fmt: skip
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n"
    )
    if status == 503:
        head += "retry-after: 1\r\n"
    return (head + "\r\n").encode() + body


def guarded(guard: Guard) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with ``guard``'s cap and header timeout."""
    cap = guard.connection_cap()

    class GuardedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > cap:
                msg = f"the server holds its limit of {cap} connections; retry in a moment"
                transport.write(refusal(503, "Service Unavailable", "too_many_connections", msg))
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(guard.header_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                msg = f"the request head did not arrive within {guard.header_timeout_s:g} s"
                self.transport.write(refusal(408, "Request Timeout", "timeout", msg))
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the head arrived; the body has its own timeout

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # the next request's head, on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11
