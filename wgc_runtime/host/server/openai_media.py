"""``POST /v1/audio/speech``, ``/v1/images/generations`` and ``/v1/images/edits``, as the
OpenAI clients call them.

Speech: ``input`` is one ``text`` segment, the model's ``audio`` outputs are the answer,
streamed as the vocoder produces them: ``response_format`` ``wav`` (the default; a streamed WAV,
its sizes unknown in the header) or ``pcm`` (raw 16-bit mono at the model's sample rate). A
request that fails before its first audio answers with its status (400, 504 ...); one that fails
after it (its deadline passes mid-stream) drops the connection before the body's end
(`StreamBroken`), so no client takes the audio so far for the whole.
Images: ``prompt`` is one ``text`` segment (after the uploaded ``image`` for an edit, shaped for
the walk input it feeds), the model's ``image`` output is the answer, as base64 PNG
(``b64_json``; ``url`` is refused: nothing is stored). ``n`` images are ``n`` requests run side
by side, seeded ``seed``, ``seed + 1`` ... when a seed is given.
``voice`` and ``speed`` set the model's options of that meaning; what the model cannot honour
(``size`` other than ``auto``, ``quality`` ...) answers 400 naming the field (`openai_params`);
a ``model`` other than the served one answers 404.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import UploadFile

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.core.conductor.door import Problem
from wgc_runtime.host.server.access_log import is_logged, record
from wgc_runtime.host.server.calls import Call, HttpError, Server, conform, until_disconnect
from wgc_runtime.host.server.media import MediaError, decode_image, pcm16, png_bytes, wav_header
from wgc_runtime.host.server.model import EDITS, IMAGES, SPEECH
from wgc_runtime.host.server.openai_params import NEVER, check_model, options_of
from wgc_runtime.host.server.parsed_route import ParsedRoute
from wgc_runtime.host.server.schemas import ImageRequest, SpeechRequest, openai_fields

SPEECH_FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm"}
MAX_IMAGES = 8  # `n` at most (as `schemas.ImageRequest`)


def _bad(field: str, why: str) -> HttpError:
    return HttpError(400, f"{field}: {why}", code="rejected", problems=[Problem(field, why)])


def speech_router(server: Server) -> APIRouter:
    api = APIRouter(route_class=ParsedRoute)

    @api.post(SPEECH, tags=["openai"], summary="Text to speech, streamed (OpenAI-compatible)")
    async def speech(body: SpeechRequest, http: Request) -> Response:
        check_model(server, body.model)
        options = options_of(server, openai_fields(body), body.options)
        fmt = body.response_format
        if fmt not in SPEECH_FORMATS:
            raise _bad("response_format", f"`{fmt}` is not supported (wav, pcm)")
        segments = [Segment("text", body.input)]
        call = Call(
            server, SPEECH, segments, ["audio"], options, body.seed, body.deadline, scope=http.scope
        )
        try:
            call.open()
        except HttpError as exc:
            raise options.named(exc) from None
        events = await call.primed(http)
        rate = server.info.rate("audio")
        return StreamingResponse(_audio(events, rate, fmt == "wav"), media_type=SPEECH_FORMATS[fmt])

    return api


class StreamBroken(Exception):
    """A streamed answer failed after its status was sent: the connection is dropped without
    the body's last chunk, so the client sees a broken transfer, never a short WAV that looks
    whole."""


async def _audio(events: AsyncIterator[Any], rate: int, wav: bool) -> AsyncIterator[bytes]:
    if wav:
        yield wav_header(rate)
    try:
        async for msg in events:
            if isinstance(msg, m.Output) and msg.modality == "audio" and msg.data is not None:
                yield pcm16(msg.data)
    except HttpError as exc:  # counted in /metrics by its outcome; the client must know too
        raise StreamBroken(f"the speech failed after it started: {exc.message}") from None


def images_router(server: Server, edits: bool) -> APIRouter:
    api = APIRouter(route_class=ParsedRoute)

    @api.post(IMAGES, tags=["openai"], summary="Text to image (OpenAI-compatible)")
    async def generate(body: ImageRequest, http: Request) -> Response:
        check_model(server, body.model)
        options = options_of(server, openai_fields(body), body.options)
        _formats(body.response_format)
        if body.user is not None and is_logged(http.scope):
            record(http.scope)["user"] = body.user
        segments = [Segment("text", body.prompt)]
        return await _images(server, IMAGES, segments, body.n, options, body.seed, http)

    if not edits:
        return api

    @api.post(EDITS, tags=["openai"], summary="Edit an image (OpenAI-compatible, multipart)")
    async def edit(http: Request) -> Response:
        form = await http.form()
        model = form.get("model")
        check_model(server, None if model is None else str(model))
        known = {"image", "image[]", "prompt", "n", "seed", "response_format", "model", "user"}
        for name in form:
            if name not in known:
                fields = {name: str(form.get(name))}
                options_of(server, fields, {})  # the default asks for nothing; else 400
                if name not in NEVER:
                    raise _bad(name, f"`{name}` is not a field of an image edit")
        uploads = (*form.getlist("image"), *form.getlist("image[]"))
        files = [f for f in uploads if isinstance(f, UploadFile)]
        if not files:
            raise _bad("image", "upload the image to edit as the multipart field `image`")
        prompt = str(form.get("prompt") or "")
        if not prompt:
            raise _bad("prompt", "give the edit as the field `prompt`")
        _formats(str(form.get("response_format") or "") or None)
        segments = []
        for i, f in enumerate(files):
            try:
                image = decode_image(await f.read(), f"image[{i}]", server.limits)
            except MediaError as exc:
                raise _bad(f"image[{i}]", str(exc).partition(": ")[2]) from None
            segments.append(Segment("image", image))
        segments.append(Segment("text", prompt))
        n = _int(form.get("n"), "n", 1)
        if n is None or not 1 <= n <= MAX_IMAGES:
            raise _bad("n", f"`{n}` images: ask for 1 to {MAX_IMAGES}")
        seed = _int(form.get("seed"), "seed", None)
        segments = conform(server.spec, segments, ["image"])
        return await _images(server, EDITS, segments, n, {}, seed, http)

    return api


def _int(value: Any, field: str, default: int | None) -> int | None:
    if value is None or value == "":
        return default
    try:
        return int(str(value))
    except ValueError:
        raise _bad(field, f"`{value}` is not an integer") from None


def _formats(fmt: str | None) -> None:
    if fmt not in (None, "b64_json"):
        raise _bad("response_format", f"`{fmt}` is not supported: images come as `b64_json`")


async def _images(
    server: Server,
    route: str,
    segments: list[Segment],
    n: int | None,
    options: dict[str, Any],
    seed: int | None,
    http: Request,
) -> Response:
    count = n or 1  # validated: 1 .. MAX_IMAGES
    calls = [
        Call(
            server,
            route,
            segments,
            ["image"],
            options,
            None if seed is None else seed + i,
            scope=http.scope,
        )
        for i in range(count)
    ]
    opened: list[Call] = []
    try:
        for call in calls:
            opened.append(call.open())
        results = await until_disconnect(http, asyncio.gather(*(c.collect() for c in opened)))
    except BaseException:
        for call in opened:
            call.cancel()
        raise
    data = []
    for outs in results:
        for o in outs:
            if o.modality == "image" and o.data is not None:
                data.append({"b64_json": base64.b64encode(png_bytes(o.data)).decode("ascii")})
    return JSONResponse({"created": int(time.time()), "data": data})
