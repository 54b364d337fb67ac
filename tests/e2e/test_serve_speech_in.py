"""Speech in, against a live `wgc serve` of Qwen3-Omni (its audio input; issue 33): the
`openai` client's ``audio.transcriptions.create`` in every response format, the realtime
websocket (audio appended in chunks, partial and final transcripts as events, a key asked
for), and the OpenAI fields of its routes honoured or refused (``voice``, ``speed``,
``temperature``, ``language``)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

openai = pytest.importorskip("openai")
websockets = pytest.importorskip("websockets")
pytest.importorskip("fastapi")

from tests.e2e.serve_support import served  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
]

KEY = "sk-speech-in"
HI = [{"role": "user", "content": "hi"}]


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)


def error(served, path: str, body) -> tuple[int, dict]:
    status, reply = served.post(path, body)
    return status, (reply or {}).get("error", {})


@pytest.fixture(scope="module")
def omni():
    with served("generated/qwen3_omni/cpu", "--api-key", KEY) as s:
        s.key = KEY
        yield s


def test_voice_speed_and_sampling_on_the_omni_model(omni) -> None:
    c = client(omni.url)
    audio = c.audio.speech.create(model="qwen3_omni", input="hi", voice="chelsie")
    assert len(audio.content) > 44
    for kwargs, field in (
        ({"voice": "alloy"}, "voice"),
        ({"voice": "ethan", "speed": 2.0}, "speed"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            c.audio.speech.create(model="qwen3_omni", input="hi", **kwargs)
        assert info.value.body["param"] == field  # type: ignore[index]
    for temperature in (1e308, -1.0):
        status, err = error(omni, "/v1/chat/completions",
                            {"messages": HI, "temperature": temperature})  # fmt: skip
        assert status == 400 and err["param"] == "temperature", err


# ---------------------------------------------------------------- speech in


def _wav(samples: np.ndarray, rate: int = 24_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


SPEECH = (np.sin(np.arange(24_000 * 2) / 7.0) * 8000).astype("<i2")  # 2 s at 24 kHz


def test_transcriptions_in_every_format(omni) -> None:
    c = client(omni.url)
    wav = ("speech.wav", _wav(SPEECH))
    text = c.audio.transcriptions.create(file=wav, model="qwen3_omni").text
    assert text
    plain = c.audio.transcriptions.create(file=wav, model="qwen3_omni", response_format="text")
    assert plain == text
    verbose = c.audio.transcriptions.create(
        file=wav, model="qwen3_omni", response_format="verbose_json",
        timestamp_granularities=["segment"],
    )  # fmt: skip
    assert verbose.text == text and verbose.duration == 2.0
    assert verbose.segments and verbose.segments[0].start == 0.0
    assert verbose.segments[-1].end == 2.0
    assert "".join(s.text for s in verbose.segments) == text
    with pytest.raises(openai.BadRequestError) as info:  # Qwen3-Omni has no `language` option
        c.audio.transcriptions.create(file=wav, model="qwen3_omni", language="en")
    assert info.value.body["param"] == "language"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        c.audio.transcriptions.create(file=("x.wav", b"not a wav"), model="qwen3_omni")


def test_realtime_transcription_over_a_websocket(omni) -> None:
    expected = (
        client(omni.url)
        .audio.transcriptions.create(file=("speech.wav", _wav(SPEECH)), model="qwen3_omni")
        .text
    )

    async def session() -> tuple[list[str], str, list[str]]:
        url = omni.url.replace("http", "ws", 1) + "/v1/realtime?intent=transcription"
        async with websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {KEY}"}
        ) as ws:
            kinds = [json.loads(await ws.recv())["type"]]
            for i in range(0, len(SPEECH), 4800):  # 0.2 s chunks
                chunk = base64.b64encode(SPEECH[i : i + 4800].tobytes()).decode()
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            await ws.send(json.dumps({"type": "input_audio_buffer.bogus"}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            deltas: list[str] = []
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 60))
                kinds.append(event["type"])
                if event["type"].endswith(".delta"):
                    deltas.append(event["delta"])
                if event["type"].endswith(".completed"):
                    return deltas, event["transcript"], kinds

    deltas, final, kinds = asyncio.run(session())
    assert kinds[0] == "transcription_session.created" and "error" in kinds
    assert "input_audio_buffer.committed" in kinds
    assert len(deltas) > 1 and "".join(deltas) == final == expected

    async def refused() -> None:
        url = omni.url.replace("http", "ws", 1) + "/v1/realtime"
        async with websockets.connect(url) as ws:  # no key
            await ws.recv()

    with pytest.raises(websockets.exceptions.InvalidStatus):
        asyncio.run(refused())
