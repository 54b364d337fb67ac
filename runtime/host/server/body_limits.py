"""The HTTP server's first check of every request body, before anything parses it.

`BodyLimits` is ASGI middleware: a body over the deployment's ``request_bytes``
(`wgc_runtime.host.inputs.Limits`) answers 413, told by its ``Content-Length`` before a byte is
read, or by counting as it arrives (a chunked body); a JSON body nested deeper than
``json_depth`` answers 400 (`wgc_runtime.host.inputs.check_json`, before FastAPI's parser
recurses into it). Both are OpenAI error bodies (`calls.HttpError`), ``param`` ``body``. What
passes is handed on unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from wgc_runtime.core.conductor.door import Problem
from wgc_runtime.host.inputs import InputError, Limits, check_bytes, check_json
from wgc_runtime.host.server.calls import HttpError

BODY_METHODS = (b"POST", b"PUT", b"PATCH")


class BodyLimits:
    """ASGI middleware bounding request bodies by ``limits`` (see the module docstring)."""

    def __init__(self, app: Any, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"].encode() not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        try:
            length = headers.get(b"content-length")
            if length is not None and length.isdigit():
                check_bytes(int(length), "body", self.limits, "request_bytes")
            chunks: list[bytes] = []
            size, more = 0, True
            while more:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    await self.app(scope, _replay([message], receive), send)
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                check_bytes(size, "body", self.limits, "request_bytes")
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if headers.get(b"content-type", b"").startswith(b"application/json"):
                check_json(body, "body", self.limits)
        except InputError as exc:
            status = 413 if "`request_bytes`" in str(exc) else 400
            await _answer(send, status, str(exc))
            return
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)


def _replay(messages: list[dict], receive: Any) -> Any:
    """A ``receive`` that gives the messages read already, then the connection's own (its
    disconnect, which streaming responses wait for)."""
    queue = list(messages)

    async def replay() -> dict:
        return queue.pop(0) if queue else await receive()

    return replay


async def _answer(send: Any, status: int, message: str) -> None:
    field, _, why = message.partition(": ")
    code = "too_large" if status == 413 else "too_deep"
    error = HttpError(status, message, code=code, problems=[Problem(field, why)])
    raw = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})
