"""A realtime session's update in both of OpenAI's shapes (`realtime_session`): the beta one
(``input_audio_format: "pcm16"``) and the GA one (``audio.input.format: {type: audio/pcm, rate:
24000}``) set the same transcription; other formats, rates and fields are refused by name with a
code; the GA description validates as the `openai` client's own GA session type."""

from __future__ import annotations

import pytest

from wgc_runtime.host.server.realtime_session import Refused, ga_session, read_update

ASR = {"model": "whisper", "language": "en", "prompt": "names"}


def ga(**input_fields) -> dict:
    return {"type": "transcription", "audio": {"input": input_fields}}


def test_both_shapes_set_the_same_transcription() -> None:
    beta = read_update({"input_audio_format": "pcm16", "input_audio_transcription": ASR})
    assert (beta.transcription, beta.ga) == (ASR, False)
    assert beta.where == "session.input_audio_transcription"
    new = read_update(ga(format={"type": "audio/pcm", "rate": 24000}, transcription=ASR))
    assert (new.transcription, new.ga) == (ASR, True)
    assert new.where == "session.audio.input.transcription"
    bare = read_update({"type": "transcription"})  # nothing set: 24 kHz PCM, no settings
    assert (bare.transcription, bare.ga) == ({}, True)
    nulls = ga(format={"type": "audio/pcm"}, turn_detection=None, noise_reduction=None)
    assert read_update({**nulls, "include": []}).ga


@pytest.mark.parametrize(
    ("session", "param", "code"),
    [
        (ga(format={"type": "audio/pcm", "rate": 16000}), "session.audio.input.format.rate",
         "unsupported_audio_format"),
        (ga(format={"type": "audio/pcm", "rate": True}), "session.audio.input.format.rate",
         "unsupported_audio_format"),
        (ga(format={"type": "audio/pcmu"}), "session.audio.input.format.type",
         "unsupported_audio_format"),
        (ga(format={"type": "audio/pcma"}), "session.audio.input.format.type",
         "unsupported_audio_format"),
        (ga(format="pcm16"), "session.audio.input.format", "invalid_value"),
        (ga(format={"type": "audio/pcm", "bits": 8}), "session.audio.input.format.bits",
         "invalid_value"),
        (ga(turn_detection={"type": "server_vad"}), "session.audio.input.turn_detection",
         "invalid_value"),
        (ga(noise_reduction={"type": "far_field"}), "session.audio.input.noise_reduction",
         "invalid_value"),
        (ga(transcription="whisper"), "session.audio.input.transcription", "invalid_value"),
        (ga(voice="alloy"), "session.audio.input.voice", "invalid_value"),
        ({"type": "transcription", "audio": {"output": {}}}, "session.audio.output",
         "invalid_value"),
        ({"type": "transcription", "include": ["item.input_audio_transcription.logprobs"]},
         "session.include", "invalid_value"),
        ({"type": "realtime", "audio": {}}, "session.type", "unsupported_session_type"),
        ({"type": "transcription", "instructions": "hi"}, "session.instructions",
         "invalid_value"),
        ({"input_audio_format": "g711_ulaw"}, "session.input_audio_format",
         "unsupported_audio_format"),
        ({"turn_detection": {"type": "server_vad"}}, "session.turn_detection", "invalid_value"),
        ("pcm16", "session", "invalid_value"),
    ],
)  # fmt: skip
def test_other_formats_rates_and_fields_are_refused_by_name(session, param, code) -> None:
    with pytest.raises(Refused) as info:
        read_update(session)
    assert (info.value.param, info.value.code) == (param, code)
    assert str(info.value)


def test_the_ga_description_is_the_openai_clients_ga_session() -> None:
    types = pytest.importorskip("openai.types.realtime")
    described = ga_session("sess_1", "whisper", "en", "names")
    event = {"type": "session.updated", "event_id": "event_1", "session": described}
    parsed = types.SessionUpdatedEvent.model_validate(event)
    assert parsed.session.type == "transcription"
    fmt = parsed.session.audio.input.format
    assert (fmt.type, fmt.rate) == ("audio/pcm", 24000)
    assert parsed.session.audio.input.transcription.language == "en"
    assert read_update(described).transcription == described["audio"]["input"]["transcription"]
