"""``POST /v1/chat/completions``, as the OpenAI clients call it.

Every message's content becomes input segments in order: a text part (or a plain string) one
``text`` segment (the stand-in byte tokenizer has no chat template, so roles are not marked), an
``image_url`` part (a ``data:`` URL) one ``image`` segment, an ``input_audio`` part (base64 WAV) one
``audio`` segment with its ``sample_rate``; images are shaped for the walk input they feed
(`calls.conform`). The model's ``text`` outputs are the reply; with ``modalities`` naming ``audio``
(a model that emits audio, e.g. an omni model's talker) its ``audio`` outputs come too, as a WAV in
``message.audio`` or, streamed, as base64 PCM16 chunks in ``delta.audio`` (as OpenAI streams audio).
``stream: true`` sends ``chat.completion.chunk`` events as server-sent events, then ``[DONE]``. The
OpenAI fields (``max_tokens``, ``temperature``, ``audio.voice`` ...) set the model's options of the
same meaning or answer 400 naming the field (`openai_params`); ``n`` samples are ``n`` requests run
side by side, seeded ``seed``, ``seed + 1`` ... (not streamed); ``finish_reason`` is ``length`` at
the token limit. ``seed`` seeds the request, and ``options`` / ``deadline`` come through
``extra_body``."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette.sse import EventSourceResponse

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.core.conductor.door import Problem
from wgc_runtime.host.inputs import Limits, check_text
from wgc_runtime.host.server.access_log import is_logged, record
from wgc_runtime.host.server.calls import Call, HttpError, Server, conform, until_disconnect
from wgc_runtime.host.server.media import (
    MediaError,
    TextDecoder,
    decode_b64_wav,
    decode_data_url,
    pcm16,
    wav_bytes,
)
from wgc_runtime.host.server.model import CHAT
from wgc_runtime.host.server.openai_params import (
    Options,
    check_model,
    finish_reason,
    options_of,
)
from wgc_runtime.host.server.parsed_route import ParsedRoute
from wgc_runtime.host.server.schemas import ChatRequest, openai_fields


def _bad(field: str, why: str) -> HttpError:
    return HttpError(400, f"{field}: {why}", code="rejected", problems=[Problem(field, why)])


def chat_segments(body: ChatRequest, limits: Limits) -> list[Segment]:
    out: list[Segment] = []
    for i, msg in enumerate(body.messages):
        parts = [{"type": "text", "text": msg.content}] if isinstance(msg.content, str) else []
        parts = parts if isinstance(msg.content, str) else list(msg.content or [])
        for j, part in enumerate(parts):
            where = f"messages[{i}].content[{j}]"
            out.append(_part(part, where, limits))
    return out


def _part(part: dict[str, Any], where: str, limits: Limits) -> Segment:
    kind = part.get("type")
    try:
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{where}.text", f"a text part's `text` is a string, got `{text!r}`")
            return Segment("text", check_text(text, f"{where}.text", limits))
        if kind == "image_url":
            url = part.get("image_url") or {}
            url = url.get("url", "") if isinstance(url, dict) else str(url)
            data, fields = decode_data_url(url, f"{where}.image_url", limits)
            return Segment("image", data, tuple(fields.items()))
        if kind == "input_audio":
            audio = part.get("input_audio") or {}
            data, fields = decode_b64_wav(audio.get("data", ""), f"{where}.input_audio", limits)
            return Segment("audio", data, tuple(fields.items()))
    except MediaError as exc:  # `field: why`
        field, _, why = str(exc).partition(": ")
        raise _bad(field, why) from None
    raise _bad(f"{where}.type", f"unknown content part `{kind}` (text, image_url, input_audio)")


def _wants(server: Server, body: ChatRequest) -> list[str]:
    modalities = body.modalities or ["text"]
    for i, mod in enumerate(modalities):
        if mod not in ("text", "audio"):
            raise _bad(f"modalities[{i}]", f"`{mod}` is not a chat modality (text, audio)")
    if "audio" in modalities and "audio" not in server.info.emits:
        raise _bad("modalities", f"`{server.info.name}` cannot produce audio")
    fmt = body.audio.format if body.audio else "wav"
    if "audio" in modalities and fmt not in ("wav", "pcm16"):
        raise _bad("audio.format", f"`{fmt}` is not supported (wav, pcm16)")
    return sorted({"text", *modalities})


def router(server: Server) -> APIRouter:
    api = APIRouter(route_class=ParsedRoute)

    @api.post(CHAT, tags=["openai"], summary="Chat completion (OpenAI-compatible)")
    async def chat(body: ChatRequest, http: Request) -> Response:
        check_model(server, body.model)
        fields = openai_fields(body)
        if body.audio is not None and body.audio.voice is not None:
            fields["voice"] = body.audio.voice
        options = options_of(server, fields, body.options)
        kind = (body.response_format or {}).get("type", "text")
        if kind != "text":
            raise _bad("response_format", f"`{kind}` is not supported: a reply is text")
        if body.n > 1 and body.session is not None:
            raise _bad("n", "a session continues one conversation: ask for n = 1")
        if body.n > 1 and body.stream:
            raise _bad("n", "a streamed answer carries one choice: ask for n = 1, or no stream")
        if body.user is not None and is_logged(http.scope):
            record(http.scope)["user"] = body.user
        want = _wants(server, body)
        segments = conform(server.spec, chat_segments(body, server.limits), want)
        seed = body.seed if body.seed is not None else server.seed
        calls = [
            Call(server, CHAT, segments, want, options,
                 None if seed is None else seed + i, body.deadline, session=body.session,
                 scope=http.scope)
            for i in range(body.n)
        ]  # fmt: skip
        opened: list[Call] = []
        try:
            for call in calls:
                opened.append(_open(call, options))
            if body.stream:
                events = await calls[0].primed(http)
                usage = bool(body.stream_options and body.stream_options.include_usage)
                chunks = _chunks(server, calls[0], events, calls[0].prompt_tokens, usage, options)
                return EventSourceResponse(({"data": c} async for c in chunks), ping=10)
            results = await until_disconnect(http, asyncio.gather(*(c.collect() for c in calls)))
        except BaseException:
            for call in opened:
                call.cancel()
            raise
        return JSONResponse(_completion(server, calls, results, body, options))

    return api


def _open(call: Call, options: Options) -> Call:
    try:
        return call.open()
    except HttpError as exc:
        raise options.named(exc) from None


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(
    server: Server,
    calls: list[Call],
    results: list[list[m.Output]],
    body: ChatRequest,
    options: dict[str, Any],
) -> dict[str, Any]:
    choices = []
    tokens = 0
    for i, (call, outs) in enumerate(zip(calls, results, strict=True)):
        message, n = _message(server, call, outs, body)
        tokens += n
        reason = finish_reason(server, options, n)
        choices.append({"index": i, "message": message, "finish_reason": reason})
    return {
        "id": f"chatcmpl-{calls[0].rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": server.info.name,
        "choices": choices,
        "usage": _usage(calls[0].prompt_tokens, tokens),
    }


def _message(
    server: Server, call: Call, outs: list[m.Output], body: ChatRequest
) -> tuple[dict[str, Any], int]:
    """One choice's message, and its text tokens."""
    text = TextDecoder()
    parts = [text.feed(o.data) for o in outs if o.modality == "text"]
    content = "".join(parts) + text.flush()
    message: dict[str, Any] = {"role": "assistant", "content": content}
    audio = b"".join(pcm16(o.data) for o in outs if o.modality == "audio" and o.data is not None)
    if audio or "audio" in (body.modalities or []):
        fmt = body.audio.format if body.audio else "wav"
        data = audio if fmt == "pcm16" else wav_bytes(audio, server.info.rate("audio"))
        message["audio"] = {
            "id": f"audio-{call.rid}",
            "data": base64.b64encode(data).decode("ascii"),
            "expires_at": int(time.time()) + 3600,
            "transcript": content,
        }
    return message, len(parts)


async def _chunks(
    server: Server,
    call: Call,
    events: AsyncIterator[Any],
    prompt: int,
    usage: bool,
    options: dict[str, Any],
) -> AsyncIterator[str]:
    head = {
        "id": f"chatcmpl-{call.rid}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": server.info.name,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps({**head, "choices": [choice], **extra})

    yield chunk({"role": "assistant", "content": ""})
    text = TextDecoder()
    n = 0
    audio_id = f"audio-{uuid.uuid4().hex[:12]}"
    try:
        async for msg in events:
            if not isinstance(msg, m.Output):
                continue
            if msg.modality == "text":
                n += 1
                piece = text.feed(msg.data)
                if piece:
                    yield chunk({"content": piece})
            elif msg.modality == "audio" and msg.data is not None:
                data = base64.b64encode(pcm16(msg.data)).decode("ascii")
                yield chunk({"audio": {"id": audio_id, "data": data}})
    except HttpError as exc:
        yield json.dumps(exc.body())
        return
    tail = text.flush()
    if tail:
        yield chunk({"content": tail})
    yield chunk({}, finish_reason(server, options, n))
    if usage:
        yield json.dumps({**head, "choices": [], "usage": _usage(prompt, n)})
    yield "[DONE]"
