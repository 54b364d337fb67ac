"""``POST /v1/audio/transcriptions``: speech to text, as the OpenAI clients call it, for any
served model that takes ``audio`` and emits ``text`` (a speech recogniser, an omni model's
audio input).

The upload (multipart ``file``, a PCM WAV at any rate) is resampled to the rate the model reads
its audio at (`wgc_runtime.host.audio`: e.g. 16 kHz for speech recognisers; a rate it cannot read
is a 400 naming ``file``), then cut into windows of at most `WINDOW_S` seconds,
each one ``audio`` segment with its ``sample_rate`` field, in order (a model that reads one clip
at a time, e.g. a 30 s encoder window, transcribes each in turn; one that reads them all keeps
its context);
``prompt``, when given, is a ``text`` segment before them. The model's ``text`` outputs are the
transcript. ``response_format``: ``json`` (``{"text", "usage"}``), ``text`` (the transcript as
``text/plain``) or ``verbose_json`` (``task``, ``language``, ``duration`` and ``segments`` with
``start`` / ``end`` seconds: one per window when the model says how many of its text outputs
each window emitted (a ``window`` record per window, `window_counts`), else one for the whole
clip; ``language`` is the request's, else the one the model says it detected (a ``detected``
record, `detected_language`), else ``auto``). ``stream: true`` sends
``transcript.text.delta`` events as the text comes, then ``transcript.text.done``.
``language`` and ``temperature`` set the model's options of those names (400 naming the field
when it has none: `openai_params`); ``timestamp_granularities`` takes ``segment`` only: with it,
a model that declares a ``timestamps`` option (a speech recogniser's) decodes its timestamp
tokens and the segments are where they fall (a ``stamps`` record per window, `timed_segments`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import torch
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sse_starlette.sse import EventSourceResponse
from starlette.datastructures import UploadFile

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.host.audio import RateError, resample
from wgc_runtime.host.server.calls import Call, HttpError, Server
from wgc_runtime.host.server.media import MediaError, TextDecoder, decode_wav
from wgc_runtime.host.server.model import TRANSCRIPTIONS
from wgc_runtime.host.server.openai_params import NEVER, bad, check_model, options_of

WINDOW_S = 30.0
WINDOW = "window"  # the channel of a model's per-window record (`window_counts`)
DETECTED = "detected"  # the channel of a window's language code (`detected_language`)
STAMPS = "stamps"  # the channel of a window's timestamp tokens (`timed_segments`)
FORMATS = ("json", "text", "verbose_json")
FIELDS = {"file", "model", "prompt", "response_format", "stream", "language", "temperature"}
FIELDS |= {"timestamp_granularities", "timestamp_granularities[]", "include", "include[]"}
FIELDS |= {"chunking_strategy", "seed"}


def windows(audio: torch.Tensor, rate: int) -> list[tuple[float, float, torch.Tensor]]:
    """``audio`` as (start s, end s, samples) windows of at most `WINDOW_S` seconds."""
    step = max(1, int(WINDOW_S * rate))
    out = []
    for i in range(0, max(1, audio.numel()), step):
        clip = audio[i : i + step]
        out.append((i / rate, (i + clip.numel()) / rate, clip.contiguous()))
    return out


def at_model_rate(
    server: Server, audio: torch.Tensor, fields: dict[str, Any], where: str
) -> tuple[torch.Tensor, int]:
    """``audio`` (at ``fields["sample_rate"]``) resampled to the rate the model reads its
    audio at (`audio.input_rate`; as it is when the model declares none), and that rate."""
    rate, to = fields["sample_rate"], server.info.input_rate
    if to is None:
        return audio, rate
    return torch.from_numpy(resample(audio.numpy(), rate, to, where).copy()), to


def router(server: Server) -> APIRouter:
    api = APIRouter()

    @api.post(TRANSCRIPTIONS, tags=["openai"], summary="Speech to text (OpenAI-compatible)")
    async def transcribe(http: Request) -> Response:
        form = await http.form()
        for name in form:
            if name not in FIELDS:
                options_of(server, {name: str(form.get(name))}, {})
                if name not in NEVER:
                    raise bad(name, f"`{name}` is not a field of a transcription")
        model = form.get("model")
        check_model(server, None if model is None else str(model))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise bad("file", "upload the audio as the multipart field `file` (a PCM WAV)")
        fmt = str(form.get("response_format") or "json")
        if fmt not in FORMATS:
            raise bad("response_format", f"`{fmt}` is not supported ({', '.join(FORMATS)})")
        grains = [str(g) for k in ("timestamp_granularities", "timestamp_granularities[]")
                  for g in form.getlist(k)]  # fmt: skip
        if any(g != "segment" for g in grains):
            raise bad("timestamp_granularities", "segment timestamps only (no `word`)")
        if form.getlist("include") or form.getlist("include[]"):
            raise bad("include", "a transcription includes nothing more (no logprobs)")
        if str(form.get("chunking_strategy") or "auto") != "auto":
            raise bad("chunking_strategy", "only `auto` (windows of 30 s)")
        fields: dict[str, Any] = {}
        for name, kind in (("language", str), ("temperature", float)):
            value = form.get(name)
            if value is not None and value != "":
                try:
                    fields[name] = kind(str(value))
                except ValueError:
                    raise bad(name, f"`{value}` is not a {kind.__name__}") from None
        options = options_of(server, fields, {})
        if (
            fmt == "verbose_json"
            and grains
            and "timestamps" in {o.name for o in server.spec.options}
        ):
            options["timestamps"] = True  # segments where the model's timestamp tokens put them
        try:
            raw = await upload.read()  # decoded in a thread: an upload may be 64 MiB
            audio, extra = await asyncio.to_thread(decode_wav, raw, "file", server.limits)
            audio, rate = await asyncio.to_thread(at_model_rate, server, audio, extra, "file")
        except (MediaError, RateError) as exc:
            raise bad("file", str(exc).partition(": ")[2], code="invalid_value") from None
        cuts = windows(audio, rate)
        segments = [Segment("audio", clip, (("sample_rate", rate),)) for _, _, clip in cuts]
        prompt = str(form.get("prompt") or "")
        if prompt:
            segments.insert(0, Segment("text", prompt))
        seed = _seed(form.get("seed"))
        want = (
            ["text", "tensor"]
            if fmt == "verbose_json" and "tensor" in server.info.emits
            else ["text"]
        )
        call = Call(server, TRANSCRIPTIONS, segments, want, options, seed, scope=http.scope,
                    audio_field="file")  # fmt: skip
        try:
            call.open()
        except HttpError as exc:
            raise options.named(exc) from None
        if str(form.get("stream") or "false").lower() == "true":
            events = await call.primed(http)
            return EventSourceResponse(({"data": d} async for d in _deltas(events)), ping=10)
        outs = await call.gather(http)
        text, pieces = _text(outs, len(cuts))
        if fmt == "text":
            return PlainTextResponse(text)
        usage = {"type": "duration", "seconds": round(audio.numel() / rate, 3)}
        if fmt == "json":
            return JSONResponse({"text": text, "usage": usage})
        language = fields.get("language") or detected_language(outs)
        timed = timed_segments(outs, cuts) if options.get("timestamps") else None
        return JSONResponse(_verbose(text, pieces, cuts, language, options, timed))

    return api


def _seed(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(str(value))
    except ValueError:
        raise bad("seed", f"`{value}` is not an integer") from None


def _text(outs: list[m.Output], n: int) -> tuple[str, list[str] | None]:
    """The transcript, and each of the ``n`` windows' when the model said how many text items
    each window emitted (`window_counts`), else None."""
    texts = [o.data for o in outs if o.modality == "text"]
    whole = TextDecoder()
    text = "".join(whole.feed(t) for t in texts) + whole.flush()
    counts = window_counts(outs, n)
    if counts is None or sum(counts) != len(texts):
        return text, None
    pieces, at = [], 0
    for count in counts:
        one = TextDecoder()
        pieces.append("".join(one.feed(t) for t in texts[at : at + count]) + one.flush())
        at += count
    return text, pieces


def window_counts(outs: list[m.Output], n: int) -> list[int] | None:
    """How many text items each of the ``n`` windows emitted, in window order, from the
    model's `WINDOW` records (a ``tensor`` emit of channel ``window``: the window's index among
    the request's audio segments and its count; the model's ``report`` walk emits one after
    each window when the request wants tensors); None unless there is exactly one per window."""
    by: dict[int, int] = {}
    for o in outs:
        if o.modality != "tensor" or o.channel != WINDOW:
            continue
        data = torch.as_tensor(o.data)
        if data.numel() != 2 or data.is_floating_point() or data.dtype == torch.bool:
            return None
        index, count = (int(x) for x in data.reshape(-1).tolist())
        if index in by or count < 0:
            return None
        by[index] = count
    return [by[i] for i in range(n)] if sorted(by) == list(range(n)) else None


def detected_language(outs: list[m.Output]) -> str | None:
    """The language the model says it heard: the first window's `DETECTED` record (a
    ``tensor`` emit of channel ``detected``: the language's code as UTF-8 bytes, e.g. a
    language token ``<|en|>`` as ``en``); None when it sends none or one that is no code."""
    for o in outs:
        if o.modality != "tensor" or o.channel != DETECTED:
            continue
        data = torch.as_tensor(o.data).reshape(-1)
        if data.dtype != torch.uint8 or not 0 < data.numel() <= 16:
            return None
        code = bytes(data.tolist()).decode("ascii", errors="replace")
        return code if code.replace("-", "").isalnum() else None
    return None


def timed_segments(
    outs: list[m.Output], cuts: list[tuple[float, float, torch.Tensor]]
) -> list[tuple[float, float, str]] | None:
    """Segments (start s, end s, text) where the model's timestamp tokens put them: each
    window's `STAMPS` record (its index, then (text item, centiseconds into the window) per
    timestamp token) cuts the window's text items; text after a window's last timestamp ends
    at the window's end. None without one record per window (`window_counts`)."""
    texts = [bytes(torch.as_tensor(o.data).tolist()) for o in outs if o.modality == "text"]
    counts = window_counts(outs, len(cuts))
    stamps: dict[int, dict[int, int]] = {}
    for o in outs:
        if o.modality == "tensor" and o.channel == STAMPS:
            data = [int(x) for x in torch.as_tensor(o.data).reshape(-1).tolist()]
            if not data or len(data) % 2 != 1 or data[0] in stamps:
                return None
            stamps[data[0]] = dict(zip(data[1::2], data[2::2], strict=True))
    if counts is None or sum(counts) != len(texts) or sorted(stamps) != list(range(len(cuts))):
        return None
    out: list[tuple[float, float, str]] = []
    at = 0
    for w, ((begin, end, _), count) in enumerate(zip(cuts, counts, strict=True)):
        start, run = begin, b""
        for j, piece in enumerate(texts[at : at + count]):
            if j not in stamps[w]:
                run += piece
                continue
            time = round(begin + stamps[w][j] / 100, 3)
            if run.strip():
                out.append((start, time, run.decode("utf-8", errors="replace")))
            start, run = time, b""
        if run.strip():
            out.append((start, round(end, 3), run.decode("utf-8", errors="replace")))
        at += count
    return out


def _verbose(
    text: str,
    pieces: list[str] | None,
    cuts: list[tuple[float, float, torch.Tensor]],
    language: str | None,
    options: dict[str, Any],
    timed: list[tuple[float, float, str]] | None = None,
) -> dict[str, Any]:
    spans = [(s, e) for s, e, _ in cuts] if pieces else [(0.0, cuts[-1][1])]
    texts = pieces or [text]
    if timed is not None:
        spans, texts = [(s, e) for s, e, _ in timed], [t for _, _, t in timed]
    segments = [
        {
            "id": i,
            "seek": int(start * 100),  # in 10 ms frames, as OpenAI's segments count
            "start": round(start, 3),
            "end": round(end, 3),
            "text": piece,
            "temperature": float(options.get("temperature", 0.0)),
        }
        for i, ((start, end), piece) in enumerate(zip(spans, texts, strict=True))
    ]
    return {
        "task": "transcribe",
        "language": language or "auto",
        "duration": round(cuts[-1][1], 3),
        "text": text,
        "segments": segments,
    }


async def _deltas(events: AsyncIterator[Any]) -> AsyncIterator[str]:
    text = TextDecoder()
    whole = []
    try:
        async for msg in events:
            if isinstance(msg, m.Output) and msg.modality == "text":
                piece = text.feed(msg.data)
                if piece:
                    whole.append(piece)
                    yield json.dumps({"type": "transcript.text.delta", "delta": piece})
    except HttpError as exc:
        yield json.dumps({"type": "error", **exc.body()})
        return
    tail = text.flush()
    whole.append(tail)
    if tail:
        yield json.dumps({"type": "transcript.text.delta", "delta": tail})
    yield json.dumps({"type": "transcript.text.done", "text": "".join(whole)})
