"""The HTTP server's first check of every request body, before anything parses it.

`BodyLimits` is ASGI middleware: a body over the deployment's ``request_bytes``
(`wgc_runtime.host.inputs.Limits`) answers 413, told by its ``Content-Length`` before a byte is
read, or by counting as it arrives (a chunked body); a body that goes ``body_timeout_s`` without
a byte answers 408 (a client that never finishes its body holds nothing for long). A JSON body
(``application/json`` or any ``+json`` type, compared case-insensitively) nested deeper than
``json_depth`` answers 400 (`wgc_runtime.host.inputs.check_json`, before FastAPI's parser
recurses into it), and so does one with more ``inputs`` segments or chat content parts than
``segments``, or a ``text`` token list longer than the model's ``kv_tokens`` (`counts`): a
body over `OFF_LOOP_BYTES` is parsed for these checks in a thread, so a large one never stalls
the event loop (``/health`` and every other request go on). All are OpenAI error bodies
(`calls.HttpError`). What passes is handed on unchanged.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from wgc_runtime.core.conductor.door import Problem
from wgc_runtime.host.inputs import (
    InputError,
    Limits,
    check_bytes,
    check_json,
    check_segments,
)
from wgc_runtime.host.server.calls import HttpError

BODY_METHODS = (b"POST", b"PUT", b"PATCH")
OFF_LOOP_BYTES = 256 << 10  # bodies larger than this are parsed in a thread


class BodyTimeout(Exception):
    """The body stopped arriving."""


def is_json(content_type: bytes) -> bool:
    """``application/json`` or a ``+json`` type, parameters and case aside."""
    kind = content_type.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or kind.endswith(b"+json")


def counts(raw: bytes, limits: Limits, tokens: int | None = None) -> None:
    """A JSON body within ``json_depth`` and, when it is a request, within ``segments``
    (native ``inputs``; chat messages' content parts, all messages together) and with no
    ``text`` segment given as a token list longer than ``tokens`` (the model's ``kv_tokens``,
    which the door checks again)."""
    check_json(raw, "body", limits)
    few = raw.count(b"{") <= limits.segments  # a segment or a part is an object
    if few and (tokens is None or raw.count(b",") <= tokens):  # a token list has its commas
        return
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return  # not JSON (FastAPI says where), or too deep (`check_json` said so)
    if not isinstance(value, dict):
        return
    inputs = value.get("inputs")
    if isinstance(inputs, list):
        check_segments(len(inputs), "inputs", limits)
        for i, seg in enumerate(inputs):
            if not isinstance(seg, dict) or seg.get("modality") != "text":
                continue
            data = seg.get("data")
            if tokens is not None and isinstance(data, list) and len(data) > tokens:
                raise InputError(
                    f"inputs[{i}].data: {len(data):,} tokens, over the {tokens:,} one request "
                    "may hold (`kv_tokens`)"
                )
    messages = value.get("messages")
    if isinstance(messages, list):
        parts = sum(len(m["content"]) if isinstance(m, dict) and isinstance(m.get("content"),
                    list) else 1 for m in messages)  # fmt: skip
        check_segments(parts, "messages", limits)


class BodyLimits:
    """ASGI middleware bounding request bodies by ``limits`` (see the module docstring)."""

    def __init__(
        self, app: Any, limits: Limits, body_timeout_s: float = 30.0, tokens: int | None = None
    ) -> None:
        self.app = app
        self.limits = limits
        self.body_timeout_s = body_timeout_s
        self.tokens = tokens  # the model's `kv_tokens`, when it says

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
                try:
                    message = await asyncio.wait_for(receive(), self.body_timeout_s)
                except TimeoutError:
                    raise BodyTimeout from None
                if message["type"] != "http.request":  # the client went away
                    await self.app(scope, _replay([message], receive), send)
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                check_bytes(size, "body", self.limits, "request_bytes")
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if is_json(headers.get(b"content-type", b"")):
                if len(body) > OFF_LOOP_BYTES:
                    await asyncio.to_thread(counts, body, self.limits, self.tokens)
                else:
                    counts(body, self.limits, self.tokens)
        except InputError as exc:
            status = 413 if "`request_bytes`" in str(exc) else 400
            await _answer(send, status, str(exc))
            return
        except BodyTimeout:
            why = f"no byte of the body arrived for {self.body_timeout_s:g} s"
            await _answer(send, 408, f"body: {why}", close=True)
            return
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)


def _replay(messages: list[dict], receive: Any) -> Any:
    """A ``receive`` that gives the messages read already, then the connection's own (its
    disconnect, which streaming responses wait for)."""
    queue = list(messages)

    async def replay() -> dict:
        return queue.pop(0) if queue else await receive()

    return replay


async def _answer(send: Any, status: int, message: str, close: bool = False) -> None:
    field, _, why = message.partition(": ")
    code = {413: "too_large", 408: "timeout"}.get(status, "too_deep")
    if "`segments`" in message:
        code = "too_many_segments"
    elif "`kv_tokens`" in message:
        code = "too_many_tokens"
    error = HttpError(status, message, code=code, problems=[Problem(field, why)])
    raw = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})
