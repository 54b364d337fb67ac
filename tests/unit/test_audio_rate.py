"""Audio inputs resampled to the rate the model reads (`wgc_runtime.host.audio`, issue 33): the
rate found in the plan (Whisper's and Qwen3-Omni's 16 kHz, none for a model without audio in),
every audio segment with a ``sample_rate`` field resampled by soxr, an unreadable rate refused
naming its input, and ``wgc run``'s inputs (``--input`` and a request file's WAV) the same."""

from __future__ import annotations

import io
import json
import wave
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import soxr
import torch

from wgc.cli.errors import UserError
from wgc.cli.request_input import read_request_file
from wgc.cli.run_inputs import read_file
from wgc.cli.run_plan import at_input_rate
from wgc_runtime.contract.flow import Segment
from wgc_runtime.host.audio import RateError, at_rate, input_rate, to_rate
from wgc_runtime.host.inputs import Limits
from wgc_runtime.host.loading import load_conductor, load_rank


def ranks(plan: str) -> list:
    return [load_rank(plan, r) for r in range(load_conductor(plan).world_size)]


@pytest.mark.parametrize(
    ("plan", "rate"),
    [
        ("generated/whisper/cpu", 16_000),
        ("generated/whisper/cpu-2rank", 16_000),
        ("generated/qwen3_omni/cpu-3rank", 16_000),  # not Code2Wav's 24 kHz: it emits audio
        ("generated/llama/cpu", None),
    ],
)
def test_the_rate_is_the_audio_reading_nodes(plan: str, rate: int | None) -> None:
    assert input_rate(ranks(plan)) == rate


def tone(n: int, rate: int) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / rate)).astype(np.float32)


def test_audio_segments_are_resampled_and_say_their_new_rate() -> None:
    x = tone(24_000, 24_000)
    segs = [
        Segment("text", "hi"),
        Segment("audio", torch.from_numpy(x), (("sample_rate", 24_000), ("goal", 1))),
        Segment("audio", torch.zeros(10), (("sample_rate", 16_000),)),  # already at the rate
        Segment("audio", torch.zeros(10)),  # no rate said: as it came
    ]
    out = to_rate(segs, 16_000)
    assert out[0] is segs[0] and out[2] is segs[2] and out[3] is segs[3]
    assert out[1].field("sample_rate") == 16_000 and out[1].field("goal") == 1
    assert out[1].data.shape == (16_000,) and out[1].data.dtype == torch.float32
    assert np.array_equal(out[1].data.numpy(), soxr.resample(x, 24_000, 16_000, quality="HQ"))
    assert to_rate(segs, None) is segs


def test_an_unreadable_rate_is_refused_naming_its_input() -> None:
    segs = [Segment("text", "hi"), Segment("audio", torch.zeros(300), (("sample_rate", 300),))]
    with pytest.raises(RateError, match=r"input 1 \(audio\): a sample rate of 300 Hz") as info:
        to_rate(segs, 16_000)
    assert info.value.index == 1


def wav_bytes(x: np.ndarray, rate: int, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    return out.getvalue()


def test_wgc_run_inputs_are_resampled_both_ways_in(tmp_path) -> None:
    """``--input audio=x.wav`` and a request file's ``"data": "x.wav"`` carry the WAV's rate
    (the request file's used to lose it) and are resampled to Whisper's 16 kHz; stereo too."""
    stereo = np.stack([tone(44_100, 44_100), tone(44_100, 44_100) / 2], axis=1)
    (tmp_path / "x.wav").write_bytes(wav_bytes(stereo.reshape(-1), 44_100, channels=2))
    limits = Limits()
    got = read_file(str(tmp_path / "x.wav"), "x", limits)
    assert got is not None and got[1] == {"sample_rate": 44_100}
    (tmp_path / "r.json").write_text(
        json.dumps({"inputs": [{"modality": "audio", "data": "x.wav"}]})
    )
    doc = read_request_file(str(tmp_path / "r.json"), lambda v, w: read_file(v, w, limits), limits)
    assert doc["inputs"][0][2] == {"sample_rate": 44_100}
    ((modality, data, fields),) = at_input_rate("generated/whisper/cpu", doc["inputs"])
    assert modality == "audio" and fields == {"sample_rate": 16_000}
    assert data.shape == (16_000, 2)
    assert np.array_equal(data, soxr.resample(got[0], 44_100, 16_000, quality="HQ"))
    with pytest.raises(UserError, match="300 Hz"):
        at_input_rate(
            "generated/whisper/cpu", [("audio", np.zeros(9, np.float32), {"sample_rate": 300})]
        )


def test_a_model_without_a_rate_takes_audio_as_it_came() -> None:
    x = np.zeros(5, np.float32)
    assert at_rate("audio", x, {"sample_rate": 8_000}, None, "x") == (x, {"sample_rate": 8_000})


@pytest.mark.parametrize(("audio_field", "param"), [(None, "inputs[1]"), ("file", "file")])
def test_every_route_refuses_an_unreadable_rate_as_a_400_naming_the_field(
    audio_field: str | None, param: str
) -> None:
    """`Call.open`, which every HTTP route goes through, resamples first: a rate it cannot read
    is refused before the door (the routes' own field, else the native ``inputs[i]``)."""
    pytest.importorskip("fastapi")
    from wgc_runtime.host.server.calls import Call, HttpError

    server: Any = SimpleNamespace(seed=0, info=SimpleNamespace(input_rate=16_000))
    segs = [Segment("text", "hi"), Segment("audio", torch.zeros(9), (("sample_rate", 300),))]
    with pytest.raises(HttpError) as info:
        Call(server, "/v1/requests", segs, ["text"], audio_field=audio_field).open()
    assert info.value.status == 400
    error = info.value.body()["error"]
    assert error["param"] == param and "300 Hz" in error["message"]
