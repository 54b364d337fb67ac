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

import msgspec

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


class _Segment(msgspec.Struct):
    modality: Any = None
    data: msgspec.Raw = msgspec.Raw(b"null")


class _Message(msgspec.Struct):
    content: msgspec.Raw = msgspec.Raw(b"null")


class _Shape(msgspec.Struct):
    """What `counts` reads of a body: every other field is skipped, values are left unparsed
    (`msgspec.Raw`), so counting a million segments takes a fraction of a full parse."""

    inputs: list[msgspec.Raw] | None = None
    messages: list[_Message] | None = None


def counts(raw: bytes, limits: Limits, tokens: int | None = None) -> None:
    """A JSON body within ``segments`` (native ``inputs``; chat messages' content parts, all
    messages together), with no ``text`` segment given as a token list longer than ``tokens``
    (the model's ``kv_tokens``, which the door checks again), and within ``json_depth``; the
    counts come first: they need no full parse."""
    few = raw.count(b"{") <= limits.segments  # a segment or a part is an object
    if not few or (tokens is not None and raw.count(b",") > tokens):  # a token list has commas
        _count(raw, limits, tokens)
    check_json(raw, "body", limits)


def _count(raw: bytes, limits: Limits, tokens: int | None) -> None:
    try:
        shape = msgspec.json.decode(raw, type=_Shape)
    except msgspec.MsgspecError:
        return  # not JSON, or not a request's shape: FastAPI's validation says what is wrong
    if shape.inputs is not None:
        check_segments(len(shape.inputs), "inputs", limits)
        for i, item in enumerate(shape.inputs if tokens is not None else ()):
            try:
                seg = msgspec.json.decode(item, type=_Segment)
                data = msgspec.json.decode(seg.data) if seg.modality == "text" else None
            except msgspec.MsgspecError:
                continue
            if isinstance(data, list) and tokens is not None and len(data) > tokens:
                raise InputError(
                    f"inputs[{i}].data: {len(data):,} tokens, over the {tokens:,} one request "
                    "may hold (`kv_tokens`)"
                )
    if shape.messages is not None:
        parts = 0
        for message in shape.messages:
            content = bytes(message.content).lstrip()
            parts += (
                len(msgspec.json.decode(content, type=list[msgspec.Raw]))
                if content[:1] == b"["
                else 1
            )
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
