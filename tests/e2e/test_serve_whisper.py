"""Speech in on the real Whisper example (issue 33): `wgc serve` of ``examples/whisper`` with a
checkpoint and tokenizer transformers wrote (`tests.unit.whisper_support`), behind an API key.
The `openai` client's ``audio.transcriptions.create`` in ``json``, ``text`` and
``verbose_json``, and the realtime websocket, each answer what transformers' own
``WhisperForConditionalGeneration.generate`` + ``WhisperTokenizerFast.decode`` make of the same
samples; a clip past 30 s is cut into 30 s windows by the route, and so is a realtime buffer."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.e2e.real_support import compile_to
from tests.e2e.serve_support import served
from tests.unit.whisper_support import clip, generate, hf_model, hf_tokenizer, write_checkpoint

transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai")
websockets = pytest.importorskip("websockets")
pytest.importorskip("fastapi")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
]

KEY = "sk-whisper"
RATE = 16_000


def pcm16(audio: torch.Tensor) -> np.ndarray:
    return (audio.clamp(-1, 1) * 32767).round().to(torch.int16).numpy().astype("<i2")


def wav(samples: np.ndarray, rate: int = RATE) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return out.getvalue()


def expected(hf, samples: np.ndarray, **kw) -> str:
    """transformers' transcript of ``samples`` (PCM16, as the server reads them: / 32768)."""
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    audio = samples.astype(np.float32) / 32768.0
    feats = fe(audio, sampling_rate=RATE, return_tensors="pt").input_features[0]
    return hf_tokenizer().decode(generate(hf, feats, **kw)[4:], skip_special_tokens=True)


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper_serve")
    hf = hf_model()
    ckpt = write_checkpoint(root / "ckpt", hf)
    plan = compile_to(root / "plan", "whisper", "cpu", {"checkpoint": str(ckpt)})
    with served(str(plan), "--api-key", KEY) as s:
        s.key = KEY
        yield s, hf


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120)


def test_transcriptions_equal_transformers_generate(whisper) -> None:
    s, hf = whisper
    samples = pcm16(clip())
    want = expected(hf, samples, language="en")
    assert want  # the tiny model says something
    c = client(s.url)
    file = ("speech.wav", wav(samples))
    got = c.audio.transcriptions.create(file=file, model="whisper", language="en")
    assert got.text == want
    plain = c.audio.transcriptions.create(
        file=file, model="whisper", language="en", response_format="text"
    )
    assert plain == want
    verbose = c.audio.transcriptions.create(
        file=file, model="whisper", language="en", response_format="verbose_json",
        timestamp_granularities=["segment"],
    )  # fmt: skip
    assert verbose.text == want and verbose.language == "en" and verbose.duration == 1.5
    assert [(g.start, g.end, g.text) for g in verbose.segments or []] == [(0.0, 1.5, want)]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=f"{s.url}/v1", api_key="sk-wrong", max_retries=0
        ).audio.transcriptions.create(file=file, model="whisper")
    with pytest.raises(openai.BadRequestError) as info:  # not one of large-v3's languages
        c.audio.transcriptions.create(file=file, model="whisper", language="xx")
    assert info.value.body["param"] == "language"  # type: ignore[index]


def test_a_clip_past_30_s_is_cut_into_windows_by_the_route(whisper) -> None:
    """Whisper refuses a clip past its 30 s window; the route sends one ``audio`` segment per
    window, transcribed in turn. Whisper's text comes through a stream's flow, whose outputs
    do not say which window they came from: one verbose segment spans the clip."""
    s, hf = whisper
    first, second = pcm16(clip(30.0, seed=1)), pcm16(clip(1.0, seed=2))
    want = [expected(hf, first, language="en"), expected(hf, second, language="en")]
    verbose = client(s.url).audio.transcriptions.create(
        file=("long.wav", wav(np.concatenate([first, second]))), model="whisper",
        language="en", response_format="verbose_json",
    )  # fmt: skip
    assert verbose.text == "".join(want) and verbose.duration == 31.0
    got = [(g.start, g.end, g.text) for g in verbose.segments or []]
    assert got == [(0.0, 31.0, "".join(want))]


def test_realtime_transcription_equals_generate(whisper) -> None:
    """Audio appended in 0.2 s chunks and committed: partial transcripts as the tokens come,
    then the final one, which is transformers' of the samples as the model reads them. (The
    route hands the samples on with their rate as a field, which Whisper does not read: it
    reads 16 kHz, so 16 kHz samples are sent, not the 24 kHz OpenAI's ``pcm16`` means; no
    route resamples yet.)"""
    s, hf = whisper
    samples = pcm16(clip(2.0, seed=7))
    want = expected(hf, samples, language="en")

    async def session() -> tuple[list[str], str, list[str]]:
        url = s.url.replace("http", "ws", 1) + "/v1/realtime?intent=transcription"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with websockets.connect(url, additional_headers=headers) as ws:
            kinds = [json.loads(await ws.recv())["type"]]
            update = {"input_audio_transcription": {"language": "en"}}
            await ws.send(json.dumps({"type": "transcription_session.update", "session": update}))
            step = RATE // 5
            for i in range(0, len(samples), step):
                chunk = base64.b64encode(samples[i : i + step].tobytes()).decode()
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            deltas: list[str] = []
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 120))
                kinds.append(event["type"])
                if event["type"].endswith(".delta"):
                    deltas.append(event["delta"])
                if event["type"].endswith((".completed", ".failed")):
                    return deltas, event.get("transcript", ""), kinds

    deltas, final, kinds = asyncio.run(session())
    assert kinds[:2] == ["transcription_session.created", "transcription_session.updated"]
    assert kinds[-1].endswith(".completed"), kinds
    assert len(deltas) > 1 and "".join(deltas) == final == want
