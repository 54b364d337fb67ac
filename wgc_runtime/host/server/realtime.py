"""``/v1/realtime`` (websocket): live transcription, as OpenAI's realtime API with the
transcription intent, for any served model that takes ``audio`` and emits ``text``.

The client appends audio in chunks (``input_audio_buffer.append``: base64 PCM16 mono at
`RATE` Hz, OpenAI's ``pcm16``) and commits it (``input_audio_buffer.commit``); each commit is
one request (the buffer, resampled to the rate the model reads its audio at as an upload is,
as ``audio`` segments of at most 30 s with their ``sample_rate``, cut
as `transcriptions.windows` cuts an upload, after the session's
``prompt`` as a ``text`` segment when it has one), answered with
``input_audio_buffer.committed``, then ``conversation.item.input_audio_transcription.delta``
events (the partial transcript, as the model emits its text) and
``conversation.item.input_audio_transcription.completed`` (the final one).
``input_audio_buffer.clear`` empties the buffer; ``transcription_session.update`` (or
``session.update``) sets the transcription's ``language`` / ``prompt`` (the model's
``language`` option: 400-like ``error`` event when it has none), in the beta shape
(``input_audio_transcription``, answered ``transcription_session.updated``) or the GA one
(``type: "transcription"``, ``audio.input.transcription``, answered ``session.updated``), and
refuses any audio format but 24 kHz PCM16 and any ``turn_detection`` (there is no server-side
voice detection: the client commits): `realtime_session`. The session opens with
``transcription_session.created``. Every refusal is an
``error`` event naming the field (``param``); the socket stays open. A buffer over the
deployment's ``audio_seconds`` is refused at the append that would pass it. When the socket
closes, the requests still running are cancelled in the conductor.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import uuid
from typing import Any

import numpy as np
import torch
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.host.server.calls import Call, HttpError, Server
from wgc_runtime.host.server.media import TextDecoder
from wgc_runtime.host.server.model import REALTIME, TRANSCRIPTIONS
from wgc_runtime.host.server.openai_params import options_of
from wgc_runtime.host.server.realtime_session import RATE, Refused, ga_session, read_update
from wgc_runtime.host.server.transcriptions import at_model_rate, windows


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


class Session:
    """One websocket's transcription session (see the module docstring)."""

    def __init__(self, server: Server, ws: WebSocket) -> None:
        self.server, self.ws = server, ws
        self.buffer = bytearray()
        self.language: str | None = None
        self.prompt = ""
        self.tasks: set[asyncio.Task] = set()
        self.last_item: str | None = None
        self.id = _id("sess")

    async def send(self, kind: str, **fields: Any) -> None:
        await self.ws.send_text(json.dumps({"event_id": _id("event"), "type": kind, **fields}))

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.transcription_session",
            "input_audio_format": "pcm16",
            "input_audio_transcription": {
                "model": self.server.info.name,
                "language": self.language,
                "prompt": self.prompt,
            },
            "turn_detection": None,
        }

    async def on(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            self.append(event.get("audio"))
        elif kind == "input_audio_buffer.commit":
            await self.commit()
        elif kind == "input_audio_buffer.clear":
            self.buffer.clear()
            await self.send("input_audio_buffer.cleared")
        elif kind in ("transcription_session.update", "session.update"):
            if self.update(event.get("session")):
                name = self.server.info.name
                ga = ga_session(self.id, name, self.language, self.prompt)
                await self.send("session.updated", session=ga)
            else:
                await self.send("transcription_session.updated", session=self.describe())
        else:
            raise Refused("type", f"unknown event type `{kind}`", "invalid_event")

    def append(self, audio: Any) -> None:
        if not isinstance(audio, str):
            raise Refused("audio", "`audio` is base64 PCM16 text")
        try:
            chunk = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise Refused("audio", "`audio` is not base64") from None
        limit = int(self.server.limits.audio_seconds * RATE * 2)
        if len(self.buffer) + len(chunk) > limit:
            seconds = self.server.limits.audio_seconds
            raise Refused("audio", f"the buffer would pass {seconds:g} s (`audio_seconds`)")
        self.buffer += chunk

    def update(self, session: Any) -> bool:
        """Applies a session update (`realtime_session.read_update`); whether it came in the
        GA shape."""
        update = read_update(session)
        asr, where = update.transcription, update.where
        model = asr.get("model")
        if model not in (None, self.server.info.name):
            raise Refused(f"{where}.model", f"`{model}` is not served")
        language = asr.get("language")
        if language:
            try:
                options_of(self.server, {"language": language}, {})
            except HttpError as exc:
                raise Refused(f"{where}.language", exc.message) from None
        self.language = language or None
        self.prompt = str(asr.get("prompt") or "")
        return update.ga

    async def commit(self) -> None:
        if len(self.buffer) < 2:
            raise Refused("input_audio_buffer", "the buffer is empty: append audio first")
        pcm = bytes(self.buffer[: len(self.buffer) // 2 * 2])
        self.buffer.clear()
        samples = torch.from_numpy(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0)
        fields = {"sample_rate": RATE}  # resampled in a thread: a buffer may be an hour long
        samples, rate = await asyncio.to_thread(at_model_rate, self.server, samples, fields, "")
        at = (("sample_rate", rate),)
        segments = [Segment("audio", clip, at) for _, _, clip in windows(samples, rate)]
        if self.prompt:
            segments.insert(0, Segment("text", self.prompt))
        options = options_of(self.server, {"language": self.language}, {})
        call = Call(self.server, TRANSCRIPTIONS, segments, ["text"], options, scope=self.ws.scope)
        try:
            call.open()
        except HttpError as exc:
            param = exc.problems[0].field if exc.problems else "input_audio_buffer"
            raise Refused(param, exc.message, exc.code) from None
        item = _id("item")
        await self.send("input_audio_buffer.committed", previous_item_id=self.last_item,
                        item_id=item)  # fmt: skip
        self.last_item = item
        task = asyncio.create_task(self.transcribe(call, item))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def transcribe(self, call: Call, item: str) -> None:
        text = TextDecoder()
        whole = []
        head = {"item_id": item, "content_index": 0}
        delta = "conversation.item.input_audio_transcription.delta"
        try:
            async for msg in call.events():
                if isinstance(msg, m.Output) and msg.modality == "text":
                    piece = text.feed(msg.data)
                    if piece:
                        whole.append(piece)
                        await self.send(delta, **head, delta=piece)
            tail = text.flush()
            if tail:
                whole.append(tail)
                await self.send(delta, **head, delta=tail)
            done = "conversation.item.input_audio_transcription.completed"
            await self.send(done, **head, transcript="".join(whole))
        except HttpError as exc:
            kind = "conversation.item.input_audio_transcription.failed"
            await self.send(kind, **head, error=exc.body()["error"])


def router(server: Server) -> APIRouter:
    api = APIRouter()

    @api.websocket(REALTIME)
    async def realtime(ws: WebSocket) -> None:
        await ws.accept()
        session = Session(server, ws)
        await session.send("transcription_session.created", session=session.describe())
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                event: Any = None
                try:
                    event = json.loads(message.get("text") or message.get("bytes") or b"")
                    if not isinstance(event, dict):
                        raise Refused("event", "an event is a JSON object", "invalid_event")
                    await session.on(event)
                except (ValueError, UnicodeDecodeError):
                    await _error(session, "event", "not JSON", "invalid_event", None)
                except Refused as exc:
                    about = event.get("event_id") if isinstance(event, dict) else None
                    await _error(session, exc.param, str(exc), exc.code, about)
        except WebSocketDisconnect:
            pass
        finally:
            for task in list(session.tasks):
                task.cancel()  # its call's `events` closes it: cancelled in the conductor
            await asyncio.gather(*session.tasks, return_exceptions=True)

    return api


async def _error(session: Session, param: str, message: str, code: str, about: Any) -> None:
    error = {"type": "invalid_request_error", "code": code, "message": message,
             "param": param, "event_id": about}  # fmt: skip
    await session.send("error", error=error)
