"""Speech in on the real Whisper example (issue 33): `wgc serve` of ``wgc_models/whisper`` with a
checkpoint and tokenizer transformers wrote (`tests.unit.whisper_support`), behind an API key.
The `openai` client's ``audio.transcriptions.create`` in ``json``, ``text`` and
``verbose_json``, and the realtime websocket, each answer what transformers' own
``WhisperForConditionalGeneration.generate`` + ``WhisperTokenizerFast.decode`` make of the same
samples; a clip past 30 s is cut into 30 s windows by the route, and so is a realtime buffer.
Audio at another rate (a 24 or 44.1 kHz upload, OpenAI realtime's 24 kHz ``pcm16``) is read as
transformers reads the same samples resampled to Whisper's 16 kHz by the same resampler (soxr)."""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr
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


def chirp(seconds: float, rate: int, seed: int = 0) -> torch.Tensor:
    """`clip`'s chirp with a little seeded noise, sampled at ``rate``."""
    t = torch.arange(int(seconds * rate)) / rate
    noise = torch.randn(t.numel(), generator=torch.Generator().manual_seed(seed))
    return (0.3 * torch.sin(2 * torch.pi * (200 + 300 * t) * t) + 0.05 * noise).float()


def expected(hf, samples: np.ndarray, rate: int = RATE, **kw) -> str:
    """transformers' transcript of ``samples`` (PCM16 at ``rate``, as the server reads them:
    / 32768, resampled to 16 kHz by soxr at its "HQ" quality)."""
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    audio = samples.astype(np.float32) / 32768.0
    if rate != RATE:
        audio = soxr.resample(audio, rate, RATE, quality="HQ")
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
    verbose = c.audio.transcriptions.create(  # no granularity: one segment per window
        file=file, model="whisper", language="en", response_format="verbose_json"
    )
    assert verbose.text == want and verbose.language == "en" and verbose.duration == 1.5
    assert [(g.start, g.end, g.text) for g in verbose.segments or []] == [(0.0, 1.5, want)]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=f"{s.url}/v1", api_key="sk-wrong", max_retries=0
        ).audio.transcriptions.create(file=file, model="whisper")
    with pytest.raises(openai.BadRequestError) as info:  # not one of large-v3's languages
        c.audio.transcriptions.create(file=file, model="whisper", language="xx")
    assert info.value.body["param"] == "language"  # type: ignore[index]


def test_verbose_json_reports_the_language_whisper_detected(whisper) -> None:
    """No ``language`` in the request: the transcript is `generate`'s with the language it
    detects, and ``verbose_json`` names that language (`detect_language`'s token, as a code)."""
    s, hf = whisper
    samples = pcm16(clip(seed=7))
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    audio = samples.astype(np.float32) / 32768.0
    feats = fe(audio, sampling_rate=RATE, return_tensors="pt").input_features
    gc = copy.deepcopy(hf.generation_config)
    token = int(hf.detect_language(input_features=feats, generation_config=gc)[0])
    code = hf_tokenizer().convert_ids_to_tokens(token).strip("<|>")
    verbose = client(s.url).audio.transcriptions.create(
        file=("speech.wav", wav(samples)), model="whisper", response_format="verbose_json"
    )
    assert f"<|{code}|>" in hf.generation_config.lang_to_id and verbose.language == code
    assert verbose.text == expected(hf, samples, task="transcribe")  # as generate, detecting


def test_segment_timestamps_are_generates_segments(whisper) -> None:
    """``verbose_json`` with ``timestamp_granularities=["segment"]``: the model's timestamp
    tokens cut the transcript, as `generate(return_timestamps=True)` cuts it into segments."""
    s, hf = whisper
    samples = pcm16(clip(2.0, seed=9))
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    feats = fe(samples.astype(np.float32) / 32768.0, sampling_rate=RATE, return_tensors="pt")
    gc = copy.deepcopy(hf.generation_config)
    out = hf.generate(feats.input_features, generation_config=gc, language="en",
                      return_timestamps=True, return_dict_in_generate=True)  # fmt: skip
    tok = hf_tokenizer()
    want = [
        (round(float(g["start"]), 3), round(float(g["end"]), 3), said)
        for g in out["segments"][0]
        if (said := tok.decode(g["tokens"], skip_special_tokens=True)).strip()
    ]
    assert len(want) > 1
    verbose = client(s.url).audio.transcriptions.create(
        file=("speech.wav", wav(samples)), model="whisper", language="en",
        response_format="verbose_json", timestamp_granularities=["segment"],
    )  # fmt: skip
    got = [(g.start, g.end, g.text) for g in verbose.segments or []]
    assert got == want


def test_a_clip_past_30_s_is_cut_into_windows_by_the_route(whisper) -> None:
    """Whisper refuses a clip past its 30 s window; the route sends one ``audio`` segment per
    window, transcribed in turn. ``verbose_json`` has one segment per window, with the window's
    times and what transformers decodes of that window alone (the model's ``window`` records
    say how many text items each window emitted); a text prompt is not a window."""
    s, hf = whisper
    parts = [pcm16(clip(30.0, seed=1)), pcm16(clip(30.0, seed=3)), pcm16(clip(1.0, seed=2))]
    want = [expected(hf, p, language="en") for p in parts]
    assert all(want) and len(set(want)) > 1  # the windows say different things
    file = ("long.wav", wav(np.concatenate(parts)))
    c = client(s.url)
    verbose = c.audio.transcriptions.create(
        file=file, model="whisper", language="en", response_format="verbose_json"
    )
    assert verbose.text == "".join(want) and verbose.duration == 61.0
    got = [(g.id, g.start, g.end, g.text) for g in verbose.segments or []]
    assert got == [(0, 0.0, 30.0, want[0]), (1, 30.0, 60.0, want[1]), (2, 60.0, 61.0, want[2])]
    prompted = c.audio.transcriptions.create(
        file=file, model="whisper", language="en", response_format="verbose_json",
        prompt="chirps",
    )  # fmt: skip
    assert [(g.start, g.end) for g in prompted.segments or []] == [(0, 30), (30, 60), (60, 61)]
    assert "".join(g.text for g in prompted.segments or []) == prompted.text


@pytest.mark.parametrize("rate", [24_000, 44_100])
def test_an_upload_at_another_rate_is_resampled_to_16_khz(whisper, rate: int) -> None:
    """A 24 or 44.1 kHz WAV reads as transformers reads it resampled to 16 kHz; a rate the
    route cannot read is a 400 naming ``file``."""
    s, hf = whisper
    samples = pcm16(chirp(1.5, rate, seed=5))
    want = expected(hf, samples, rate, language="en")
    assert want
    c = client(s.url)
    got = c.audio.transcriptions.create(
        file=("speech.wav", wav(samples, rate)), model="whisper", language="en",
        response_format="verbose_json",
    )  # fmt: skip
    assert got.text == want and got.duration == 1.5
    with pytest.raises(openai.BadRequestError) as info:
        c.audio.transcriptions.create(file=("low.wav", wav(samples[:900], 300)), model="whisper")
    assert info.value.body["param"] == "file"  # type: ignore[index]
    assert "300 Hz" in info.value.body["message"]  # type: ignore[index]


def test_realtime_transcription_equals_generate(whisper) -> None:
    """24 kHz PCM16 (OpenAI's ``pcm16``, as its clients send it) appended in 0.2 s chunks and
    committed: partial transcripts as the tokens come, then the final one, which is
    transformers' of the samples resampled to the 16 kHz Whisper reads."""
    s, hf = whisper
    rate = 24_000
    samples = pcm16(chirp(2.0, rate, seed=7))
    want = expected(hf, samples, rate, language="en")

    async def session() -> tuple[list[str], str, list[str]]:
        url = s.url.replace("http", "ws", 1) + "/v1/realtime?intent=transcription"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with websockets.connect(url, additional_headers=headers) as ws:
            kinds = [json.loads(await ws.recv())["type"]]
            update = {"input_audio_transcription": {"language": "en"}}
            await ws.send(json.dumps({"type": "transcription_session.update", "session": update}))
            step = rate // 5
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


def test_realtime_takes_the_ga_session_shape_and_refuses_other_rates(whisper) -> None:
    """The GA ``session.update`` (``type: transcription``, ``audio.input.format: {type:
    audio/pcm, rate: 24000}``, ``audio.input.transcription``) is answered ``session.updated``
    in that shape (the `openai` client's own GA type parses it) and sets the language; another
    rate or type is an ``error`` event naming the field, coded ``unsupported_audio_format``,
    and the socket goes on to transcribe what transformers does."""
    s, hf = whisper
    rate = 24_000
    samples = pcm16(chirp(1.5, rate, seed=11))
    want = expected(hf, samples, rate, language="en")
    assert want
    events = pytest.importorskip("openai.types.realtime")

    def ga(fmt: dict) -> str:
        asr = {"model": "whisper", "language": "en"}
        session = {
            "type": "transcription",
            "audio": {"input": {"format": fmt, "transcription": asr}},
        }
        return json.dumps({"type": "session.update", "session": session})

    async def session() -> tuple[list[dict], dict, str]:
        url = s.url.replace("http", "ws", 1) + "/v1/realtime?intent=transcription"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with websockets.connect(url, additional_headers=headers) as ws:
            await ws.recv()  # transcription_session.created
            errors = []
            for fmt in ({"type": "audio/pcm", "rate": 16000}, {"type": "audio/pcmu"}):
                await ws.send(ga(fmt))
                errors.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
            await ws.send(ga({"type": "audio/pcm", "rate": rate}))
            updated = json.loads(await asyncio.wait_for(ws.recv(), 30))
            chunk = base64.b64encode(samples.tobytes()).decode()
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            while True:
                event = json.loads(await asyncio.wait_for(ws.recv(), 120))
                if event["type"].endswith((".completed", ".failed")):
                    return errors, updated, event.get("transcript", "")

    errors, updated, final = asyncio.run(session())
    assert [(e["type"], e["error"]["code"], e["error"]["param"]) for e in errors] == [
        ("error", "unsupported_audio_format", "session.audio.input.format.rate"),
        ("error", "unsupported_audio_format", "session.audio.input.format.type"),
    ]
    parsed = events.SessionUpdatedEvent.model_validate(updated)
    fmt = parsed.session.audio.input.format
    assert (fmt.type, fmt.rate) == ("audio/pcm", rate)
    assert parsed.session.audio.input.transcription.language == "en"
    assert final == want


def test_the_openai_clients_realtime_connection_transcribes(whisper) -> None:
    """The `openai` client's own realtime connection (GA events, ``intent=transcription``):
    a refused rate is its ``ErrorEvent``, the GA update its ``SessionUpdatedEvent``, and the
    completed transcript transformers' of the 24 kHz samples resampled to 16 kHz."""
    s, hf = whisper
    rate = 24_000
    samples = pcm16(chirp(1.5, rate, seed=11))
    want = expected(hf, samples, rate, language="en")
    asr = {"model": "whisper", "language": "en"}
    with client(s.url).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert conn.recv().type == "transcription_session.created"
        for fmt in ({"type": "audio/pcm", "rate": 48000}, {"type": "audio/pcm", "rate": rate}):
            session = {
                "type": "transcription",
                "audio": {"input": {"format": fmt, "transcription": asr}},
            }
            conn.session.update(session=session)  # type: ignore[arg-type]
        refused, updated = conn.recv(), conn.recv()
        assert refused.type == "error" and refused.error.code == "unsupported_audio_format"  # type: ignore[union-attr]
        assert updated.type == "session.updated"
        for i in range(0, len(samples), rate // 5):
            conn.input_audio_buffer.append(
                audio=base64.b64encode(samples[i : i + rate // 5].tobytes()).decode()
            )
        conn.input_audio_buffer.commit()
        while not (event := conn.recv()).type.endswith((".completed", ".failed")):
            pass
    assert event.type.endswith(".completed") and event.transcript == want  # type: ignore[union-attr]
