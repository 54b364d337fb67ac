"""Inputs checked at the edge (issue 14 point 5), over HTTP: every malformed or oversized body,
``data:`` URL, base64 image or audio and text answers 400 (413 for a body over
``request_bytes``) naming the field and the reason, with the readers `wgc run` uses
(`wgc_runtime.host.inputs`; `test_input_edge`); a lowered limit refuses what the default
accepts. The application is driven in process through ASGI, on a stand-in gateway: what passes
the edge and the door reaches `Gateway.submit`, which raises `Submitted`.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.real_support import compile_to
from tests.unit.test_input_edge import deep, png, wav
from wgc_runtime.host.inputs import Limits
from wgc_runtime.host.loading import ensure_import_root, load_plan
from wgc_runtime.host.server.app import create_app
from wgc_runtime.host.server.calls import Server
from wgc_runtime.host.server.metrics import Metrics
from wgc_runtime.host.server.model import ModelInfo


class Submitted(Exception):
    """The request passed every check and was submitted."""


class StandInGateway:
    def submit(self, *args: Any) -> None:
        raise Submitted


def app_for(plan: Path, limits: Limits) -> Any:
    ensure_import_root()
    spec, ranks = load_plan(str(plan))
    server = Server(spec, ModelInfo.of(spec, ranks), StandInGateway(), Metrics(dict))  # type: ignore[arg-type]
    server.limits = limits
    return create_app(server, dict)


def post(app: Any, path: str, body: bytes, chunks: int = 1, length: bool = True) -> tuple[int, Any]:
    """POST ``body`` (in ``chunks`` pieces; without Content-Length when ``length`` is false)
    through ASGI: (status, the JSON answer)."""
    headers = [(b"content-type", b"application/json")]
    if length:
        headers.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    step = max(1, -(-len(body) // chunks))
    pieces = [body[i : i + step] for i in range(0, len(body), step)] or [b""]
    messages = [
        {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1}
        for i, p in enumerate(pieces)
    ]
    sent: list[dict] = []

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(raw)


def native(data: Any, **segment: Any) -> bytes:
    segments = [{"modality": "text", "data": data, **segment}]
    return json.dumps({"inputs": segments, "want": ["text"]}).encode()


def chat(part: dict[str, Any]) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": [part]}]}).encode()


def data_url(mime: str, raw: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def image_part(raw: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url("image/png", raw)}}


def audio_part(raw: bytes) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(raw).decode()}}


NATIVE = "/v1/requests"
CHAT = "/v1/chat/completions"
LLAMA, OMNI = "llama/cpu", "qwen3_omni/cpu"  # `prompt: i64[T]`; chat with images and audio

# name -> (placement, route, body, limits, status, the message's part)
CASES: dict[str, tuple[str, str, bytes, Limits, int, str]] = {
    "body over request_bytes": (
        LLAMA, NATIVE, native("a" * 200), Limits(request_bytes=200), 413,  # llama: kv_tokens 256
        "body: its size in bytes is 2",
    ),
    "JSON nested too deep": (
        LLAMA, NATIVE, native(json.loads(deep(100))), Limits(), 400,
        "body: its nesting depth is 103, over the limit of 64 (`json_depth`)",
    ),
    "corrupt PNG data URL": (
        LLAMA, NATIVE, native(data_url("image/png", png(4, 4)[:30])), Limits(), 400,
        "inputs[0].data: not an image",
    ),
    "PNG decompression bomb": (
        LLAMA, NATIVE, native(data_url("image/png", png(100_000, 100_000))), Limits(), 400,
        "inputs[0].data: a decompression bomb",
    ),
    "PNG over image_pixels": (
        LLAMA, NATIVE, native(data_url("image/png", png(8000, 6000))), Limits(), 400,
        "(8000 x 6000) is 48,000,000, over the limit of 40,000,000 (`image_pixels`)",
    ),
    "corrupt WAV data URL": (
        LLAMA, NATIVE, native(data_url("audio/wav", b"RIFF\0\0\0\0WAVEjunk")), Limits(), 400,
        "inputs[0].data: not a PCM WAV",
    ),
    "data URL that is not base64": (
        LLAMA, NATIVE, native("data:image/png;base64,@@@@"), Limits(), 400,
        "inputs[0].data: the data URL's payload is not base64",
    ),
    "b64 tensor over file_bytes": (
        LLAMA, NATIVE, native({"dtype": "i64", "b64": base64.b64encode(bytes(800)).decode()}),
        Limits(file_bytes=100), 400, "inputs[0].data: its size in bytes is 801",
    ),
    "list over array_elements": (
        LLAMA, NATIVE, native(list(range(50))), Limits(array_elements=10), 400,
        "inputs[0].data: the array's element count is 50, over the limit of 10",
    ),
    "float list where the port is i64[T]": (
        LLAMA, NATIVE, native([1.5, 2.0]), Limits(), 400, "expected dtype i64, got f32[2]",
    ),
    "text over text_chars": (
        LLAMA, NATIVE, native("hello"), Limits(text_chars=4), 400,
        "inputs[0].data: the text's length in characters is 5, over the limit of 4",
    ),
    "chat text over text_chars": (
        LLAMA, CHAT, chat({"type": "text", "text": "hello"}), Limits(text_chars=4), 400,
        "messages[0].content[0].text: the text's length in characters is 5",
    ),
    "chat image that is a bomb": (
        OMNI, CHAT, chat(image_part(png(100_000, 100_000))),
        Limits(), 400, "messages[0].content[0].image_url: a decompression bomb",
    ),
    "chat audio that is not a WAV": (
        OMNI, CHAT, chat(audio_part(b"not a wav")),
        Limits(), 400, "messages[0].content[0].input_audio: not a PCM WAV",
    ),
    "chat audio over audio_seconds": (
        OMNI, CHAT, chat(audio_part(wav(1.0))),
        Limits(audio_seconds=0.5), 400, "its length in seconds is 1.0, over the limit of 0.5",
    ),
    "chat audio that is not base64": (
        OMNI, CHAT, chat({"type": "input_audio", "input_audio": {"data": "@@"}}), Limits(), 400,
        "messages[0].content[0].input_audio: `data` is not base64",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def apps(tmp_path_factory) -> dict[Any, Any]:
    """Placement -> its compile (in a temporary folder); (placement, limits) -> an app."""
    root = tmp_path_factory.mktemp("plans")
    plans: dict[Any, Any] = {}
    for p in (LLAMA, OMNI):
        family, placement = p.split("/")
        plans[p] = compile_to(root / family, family, placement, {})
    return plans


def app_of(apps: dict, placement: str, limits: Limits) -> Any:
    if (placement, limits) not in apps:
        apps[placement, limits] = app_for(apps[placement], limits)
    return apps[placement, limits]


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_is_refused_naming_it_and_why(case: str, apps: dict) -> None:
    placement, route, body, limits, status, message = CASES[case]
    got, answer = post(app_of(apps, placement, limits), route, body)
    assert got == status, answer
    assert message in answer["error"]["message"], answer
    assert answer["error"]["problems"][0]["field"], answer


def test_a_chunked_body_over_request_bytes_is_413_as_it_arrives(apps: dict) -> None:
    app = app_of(apps, LLAMA, Limits(request_bytes=1000))
    status, answer = post(app, NATIVE, native("a" * 5000), chunks=10, length=False)
    assert status == 413 and "`request_bytes`" in answer["error"]["message"], answer


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][3] != Limits()])
def test_the_defaults_accept_what_a_lowered_limit_refuses(case: str, apps: dict) -> None:
    placement, route, body, _, _, _ = CASES[case]
    with pytest.raises(Submitted):  # past the edge and the door
        post(app_of(apps, placement, Limits()), route, body)
