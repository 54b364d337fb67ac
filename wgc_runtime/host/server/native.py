"""``POST /v1/requests``: any model, any flow; segments in, every output out.

The body (`schemas.NativeRequest`) is what a `Submit` carries: input segments in order (with
their fields), the wanted modalities, options, and the wgc extras (``seed``, ``deadline``,
``trace``). The answer is every emitted output with where it came from (flow, walk, channel,
loop iteration) and its value as a JSON tensor (`media.tensor_json`; text outputs also carry
their decoded ``text``): all at once, or streamed as they are emitted, as server-sent events
(``stream: "sse"`` or true: ``output`` events, ``trace`` events when traced, then ``done`` or
``error``) or as NDJSON (``stream: "ndjson"``: one such event per line, named in ``"event"``).
The answer (or its ``done`` event) says the request's own ``timing``: its first output per
modality and, with audio, the audio's seconds and real-time factor.
V-JEPA rollouts and π0.5 action chunks are served this way.

    curl -N localhost:8000/v1/requests -d '{"inputs": [{"modality": "text", "data": "hello"}],
         "want": ["audio"], "stream": "sse"}'
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sse_starlette.sse import EventSourceResponse

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.core.conductor.door import Problem
from wgc_runtime.host.inputs import Limits
from wgc_runtime.host.server.calls import Call, HttpError, Server
from wgc_runtime.host.server.media import (
    MediaError,
    TextDecoder,
    decode_data_url,
    tensor_from_json,
    tensor_json,
)
from wgc_runtime.host.server.model import NATIVE
from wgc_runtime.host.server.parsed_route import ParsedRoute
from wgc_runtime.host.server.schemas import NativeRequest, SegmentIn


def segments_of(inputs: list[SegmentIn], limits: Limits) -> list[Segment]:
    """The request's segments, decoded (`media.tensor_from_json`) within ``limits``; a bad one
    is a 400."""
    out = []
    for i, seg in enumerate(inputs):
        where = f"inputs[{i}]"
        try:
            extra: dict[str, Any] = {}
            if isinstance(seg.data, str) and seg.data.startswith("data:"):  # a WAV: sample_rate
                data, extra = decode_data_url(seg.data, f"{where}.data", limits)
            else:
                data = tensor_from_json(seg.data, seg.dtype, f"{where}.data", limits)
            fields = extra | {
                k: tensor_from_json(v, None, f"{where}.fields.{k}", limits)
                for k, v in seg.fields.items()
            }
        except MediaError as exc:
            field, _, why = str(exc).partition(": ")
            problem = Problem(field, why)
            raise HttpError(400, str(exc), code="rejected", problems=[problem]) from None
        out.append(Segment(seg.modality, data, tuple(fields.items())))
    return out


class OutputJson:
    """Outputs as JSON events, with a text decoder per text modality."""

    def __init__(self) -> None:
        self.texts: dict[str, TextDecoder] = {}

    def output(self, msg: m.Output) -> dict[str, Any]:
        out: dict[str, Any] = {
            "flow": msg.flow,
            "walk": msg.walk,
            "modality": msg.modality,
            "channel": msg.channel,
            "iteration": list(msg.iters),
            "value": tensor_json(msg.data),
        }
        if msg.modality.startswith("text"):
            out["text"] = self.texts.setdefault(msg.modality, TextDecoder()).feed(msg.data)
        return out

    def event(self, msg: m.Output | c.WalkTrace) -> tuple[str, dict[str, Any]]:
        if isinstance(msg, c.WalkTrace):
            phase = {"flow": msg.flow, "walk": msg.walk, "done": msg.done}
            return "trace", {**phase, "seconds": msg.seconds}
        return "output", self.output(msg)


def router(server: Server) -> APIRouter:
    api = APIRouter(route_class=ParsedRoute)

    @api.post(NATIVE, tags=["native"], summary="Run a request on any model")
    async def run(body: NativeRequest, http: Request) -> Response:
        call = Call(
            server,
            NATIVE,
            segments_of(body.inputs, server.limits),
            body.want,
            body.options,
            body.seed,
            body.deadline,
            body.trace,
            session=body.session,
            scope=http.scope,
        ).open()
        if not body.stream:
            t0 = time.monotonic()
            outs = await call.gather(http)
            conv = OutputJson()
            return JSONResponse(
                {
                    "id": call.rid,
                    "model": server.info.name,
                    "outputs": [conv.output(o) for o in outs],
                    "seconds": round(time.monotonic() - t0, 6),
                    "timing": call.timing(),
                }
            )
        events = _events(call)
        if body.stream == "ndjson":
            lines = (json.dumps({"event": name, **data}) + "\n" async for name, data in events)
            return StreamingResponse(lines, media_type="application/x-ndjson")
        sse = ({"event": name, "data": json.dumps(data)} async for name, data in events)
        return EventSourceResponse(sse, ping=10)

    return api


async def _events(call: Call) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    conv = OutputJson()
    t0 = time.monotonic()
    n = 0
    try:
        async for msg in call.events():
            n += isinstance(msg, m.Output)
            yield conv.event(msg)
    except HttpError as exc:
        yield "error", {**exc.body(), "status": exc.status}
        return
    seconds = round(time.monotonic() - t0, 6)
    yield "done", {"id": call.rid, "outputs": n, "seconds": seconds, "timing": call.timing()}
