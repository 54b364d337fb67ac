"""The HTTP server's first check of every request body, before anything parses it.

`BodyLimits` is ASGI middleware: a body over the deployment's ``request_bytes``
(`wgc_runtime.host.inputs.Limits`) answers 413, told by its ``Content-Length`` before a byte is
read, or by counting as it arrives (a chunked body); a body that goes ``body_timeout_s`` without
a byte answers 408 (a client that never finishes its body holds nothing for long). A JSON body
(``application/json`` or any ``+json`` type, compared case-insensitively) nested deeper than
``json_depth`` answers 400 (`wgc_runtime.host.inputs.check_json`, before FastAPI's parser
recurses into it), and so does one with more ``inputs`` segments or chat content parts than
``segments``, or a ``text`` token list longer than the model's ``kv_tokens`` (`counts`);
a body that has shown more objects or commas than those as it arrives is checked on what came
so far (`early`, in a thread) and refused before the rest is read (the server drops it). A
JSON body over `OFF_LOOP_BYTES` is checked and parsed in one pass in a worker thread
(`checked`), and what it parsed to goes to the route in the scope (`parsed_route`), so FastAPI
does not parse it again on the event loop; its object brackets are counted as it arrives, so a
body with few needs no count at all. (The parsers hold the GIL while they run: the thread keeps
the loop's own work out of the way, it does not make the parse free; what bounds the stall is
what the checks cost, a fraction of a second for a 35 MB body.) All are OpenAI error bodies
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
    loads_within,
)
from wgc_runtime.host.server.calls import HttpError
from wgc_runtime.host.server.parsed_route import PARSED, Unparsable

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


def early(prefix: bytearray, limits: Limits, tokens: int | None) -> str | None:
    """Why a body whose first bytes already hold more than ``segments`` native segments, or a
    longer token list than ``tokens``, is refused, else None. The prefix is closed as a body
    would go on: to its last ``}`` then ``]}`` (the segments so far), or to before its last
    ``,`` then ``]}]}`` (the last segment's token list so far), and counted as a body is
    (`counts`). JSON's tokens are decided by what comes before them, so a closed prefix that
    parses holds only what the whole body holds (a later ``inputs`` key that would replace
    the array aside: such a body is refused too); one that does not parse says nothing."""
    for cut, close in ((prefix.rfind(b"}") + 1, b"]}"), (prefix.rfind(b","), b"]}]}")):
        if cut <= 0:
            continue
        try:
            _count(bytes(prefix[:cut]) + close, limits, tokens)
        except InputError as exc:
            return f"{exc} (in its first {cut:,} bytes)"
    return None


def checked(raw: bytes, limits: Limits, tokens: int | None, braces: int) -> Any:
    """`counts`' checks, then the body parsed (``json.loads``, as FastAPI's parser would) in
    the same pass as its depth check: what the route gets (`parsed_route`). Text that is not
    JSON: the parser's error, which the route raises for FastAPI to report as it would."""
    if braces > limits.segments or (tokens is not None and raw.count(b",") > tokens):
        _count(raw, limits, tokens)
    check_bytes(len(raw), "body", limits, "request_bytes")
    try:
        return loads_within(raw, "body", limits)
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        return Unparsable(exc)


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
            except msgspec.MsgspecError:
                continue
            data = bytes(seg.data).strip()
            # a token list holds numbers only: its commas count its ids, without a parse
            n = data.count(b",") + (data[1:].lstrip()[:1] != b"]") if data[:1] == b"[" else 0
            if seg.modality == "text" and tokens is not None and n > tokens:
                raise InputError(
                    f"inputs[{i}].data: {n:,} tokens, over the {tokens:,} one request "
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
            buf = bytearray()
            braces, commas, more, tried = 0, 0, True, 0
            comma_cap = float("inf") if self.tokens is None else self.tokens
            json_body = is_json(headers.get(b"content-type", b""))
            while more:
                try:
                    message = await asyncio.wait_for(receive(), self.body_timeout_s)
                except TimeoutError:
                    raise BodyTimeout from None
                if message["type"] != "http.request":  # the client went away
                    await self.app(scope, _replay([message], receive), send)
                    return
                chunk = message.get("body", b"")
                check_bytes(len(buf) + len(chunk), "body", self.limits, "request_bytes")
                braces += chunk.count(b"{")  # a segment or a part is an object
                commas += chunk.count(b",")  # a token list has commas
                buf += chunk
                more = message.get("more_body", False)
                many = braces > self.limits.segments or commas > comma_cap
                if json_body and more and many and len(buf) > tried:
                    tried = 2 * len(buf)  # the tries cost at most twice one parse of the body
                    args = (buf, self.limits, self.tokens)
                    if too_many := await asyncio.to_thread(early, *args):
                        # answered keeping the connection: the server drops the body's rest
                        await _answer(send, 400, too_many)
                        return
            body = bytes(buf)
            del buf
            if json_body:
                if len(body) > OFF_LOOP_BYTES:
                    args = (body, self.limits, self.tokens, braces)
                    scope[PARSED] = await asyncio.to_thread(checked, *args)
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
