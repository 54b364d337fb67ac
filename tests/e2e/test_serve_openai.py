"""The official `openai` client, unmodified, against live `wgc serve` servers on loopback (the toy
nodes): chat completions plain and streamed (BAGEL), with an image in (BAGEL) and with audio out
(Qwen3-Omni), speech whose streamed bytes form a valid WAV (Qwen3-Omni), image generation and
edits (BAGEL), and a route a model lacks answering 404 with the reason. (Orpheus, the speech
model, is served in `test_serve_native`.)"""

from __future__ import annotations

import base64
import io
import sys
import wave
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
from PIL import Image  # noqa: E402

from tests.e2e.serve_support import served  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def bagel():
    with served("generated/bagel/cpu") as s:
        yield s


@pytest.fixture(scope="module")
def omni():
    with served("generated/qwen3_omni/cpu") as s:
        yield s


@pytest.mark.slow
def test_chat_completion(bagel) -> None:
    r = client(bagel.url).chat.completions.create(
        model="bagel", messages=[{"role": "user", "content": "hello"}]
    )
    assert r.object == "chat.completion" and r.model == "bagel"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    assert r.usage is not None
    limit = 500  # BAGEL's `max_tokens` default
    reason = "length" if r.usage.completion_tokens >= limit else "stop"
    assert r.choices[0].finish_reason == reason
    assert r.usage is not None and r.usage.prompt_tokens == len(b"hello")


@pytest.mark.slow
def test_chat_completion_streamed_is_the_same_text(bagel) -> None:
    c = client(bagel.url)
    messages = [{"role": "user", "content": "a story"}]
    whole = c.chat.completions.create(model="bagel", messages=messages, seed=3)
    chunks = list(c.chat.completions.create(model="bagel", messages=messages, stream=True, seed=3))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == whole.choices[0].message.content and len(chunks) > 3


@pytest.mark.slow
def test_chat_with_an_image_in(bagel) -> None:
    png = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 30)).save(png, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what?"}]
    r = client(bagel.url).chat.completions.create(
        model="bagel", messages=[{"role": "user", "content": content}]
    )
    assert r.choices[0].message.content


@pytest.mark.slow
def test_image_generation_and_edit(bagel) -> None:
    c = client(bagel.url)
    out = c.images.generate(model="bagel", prompt="a red cube", n=2, extra_body={"seed": 5})
    images = [Image.open(io.BytesIO(base64.b64decode(d.b64_json or ""))) for d in out.data]
    assert [im.size for im in images] == [(64, 64), (64, 64)] and images[0].format == "PNG"
    again = c.images.generate(model="bagel", prompt="a red cube", extra_body={"seed": 5})
    assert again.data[0].b64_json == out.data[0].b64_json  # one seed, one image
    png = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(png, format="PNG")
    edited = c.images.edit(model="bagel", image=("in.png", png.getvalue()), prompt="blue")
    edited_image = Image.open(io.BytesIO(base64.b64decode(edited.data[0].b64_json or "")))
    assert edited_image.size == (32, 32)  # the input's resized shape (32 px is the tiny minimum)


@pytest.mark.slow
def test_a_model_without_audio_has_no_speech_route(bagel) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(bagel.url).audio.speech.create(model="bagel", input="hi", voice="ethan")
    assert "`bagel` cannot produce audio" in str(info.value)


@pytest.mark.slow
def test_bad_options_are_a_400_naming_the_field(bagel) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(bagel.url).chat.completions.create(
            model="bagel",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"options": {"thnk": True}},
        )
    assert "options.thnk: unknown option `thnk` (did you mean `think`?)" in str(info.value)


@pytest.mark.slow
def test_speech_streams_a_valid_wav(omni) -> None:
    c = client(omni.url)
    with c.audio.speech.with_streaming_response.create(
        model="qwen3_omni", input="hello there", voice="ethan", response_format="wav"
    ) as r:
        assert r.headers["content-type"].startswith("audio/wav")
        parts = list(r.iter_bytes())
    data = b"".join(parts)
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (24_000, 2, 1)
        frames = w.readframes(10**9)
    assert len(frames) == len(data) - 44 > 0
    pcm = c.audio.speech.create(
        model="qwen3_omni", input="hello there", voice="ethan", response_format="pcm"
    )
    assert pcm.content == frames


@pytest.mark.slow
def test_chat_with_audio_out(omni) -> None:
    c = client(omni.url)
    r = c.chat.completions.create(
        model="qwen3_omni",
        messages=[{"role": "user", "content": "say hi"}],
        modalities=["text", "audio"],
        audio={"voice": "ethan", "format": "wav"},
    )
    audio = r.choices[0].message.audio
    assert audio is not None and audio.transcript == r.choices[0].message.content
    with wave.open(io.BytesIO(base64.b64decode(audio.data))) as w:
        assert w.getnframes() > 0
    chunks = list(
        c.chat.completions.create(
            model="qwen3_omni",
            messages=[{"role": "user", "content": "say hi"}],
            modalities=["text", "audio"],
            audio={"voice": "ethan", "format": "pcm16"},
            stream=True,
        )
    )
    streamed = b"".join(
        base64.b64decode(a.data or "")
        for ch in chunks
        if ch.choices and (a := getattr(ch.choices[0].delta, "audio", None))
    )
    assert 2 * w.getnframes() == len(streamed)


@pytest.mark.slow
def test_models_lists_the_served_model(omni) -> None:
    assert [m.id for m in client(omni.url).models.list()] == ["qwen3_omni"]


@pytest.mark.slow
def test_what_the_openai_routes_cannot_take_is_a_400_never_silently_changed(bagel) -> None:
    c = client(bagel.url)
    png = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(png, format="PNG")
    with pytest.raises(openai.BadRequestError) as info:  # was clamped to 8 images
        c.images.edit(model="bagel", image=("in.png", png.getvalue()), prompt="blue", n=20)
    assert "n: `20` images: ask for 1 to 8" in str(info.value)
    status, reply = bagel.post(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    )
    assert status == 400  # was sent as the text "5"
    assert reply["error"]["param"] == "messages[0].content[0].text"
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(
            model="bagel",
            messages=[{"role": "user", "content": [{"type": "video_url", "video_url": "x"}]}],
        )
    assert "unknown content part `video_url`" in str(info.value)
