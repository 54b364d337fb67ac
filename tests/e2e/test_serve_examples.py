"""`wgc serve` runs every example on loopback (the toy nodes): the examples the OpenAI tests do
not serve (Llama, π0.5, V-JEPA 2-AC, Wan2.2, Whisper) over the native route, each answer equal,
bit for bit, to the same request (the same seed) sent to the same deployment by the Python
client, V-JEPA's streamed rollout arriving one frame per event, and each model's OpenAI routes
as its flows allow them (Llama and Whisper chat; none for the others, each saying why)."""

from __future__ import annotations

import base64
import io
import json
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")

from tests.e2e.serve_support import served  # noqa: E402
from wgc_runtime.host.client import Client  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")

NATIVE = "/v1/requests"
CHAT = "/v1/chat/completions"
CLIP = torch.sin(torch.linspace(0, 200, 16000)) * 0.5
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
ACTIONS = torch.linspace(-1, 1, 16 * 7).reshape(16, 7)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)
IMAGES = torch.arange(3 * 16 * 16 * 3).reshape(3, 16, 16, 3).remainder(251).to(torch.uint8)

DTYPES = {"f32": "<f4", "i64": "<i8", "u8": "u1", "bool": "?", "i32": "<i4"}


def enc(t: torch.Tensor) -> dict[str, Any]:
    """A tensor as the native route takes it: dtype, shape, base64 of its bytes."""
    name = {torch.float32: "f32", torch.int64: "i64", torch.uint8: "u8"}[t.dtype]
    raw = t.contiguous().numpy().tobytes()
    return {"dtype": name, "shape": list(t.shape), "b64": base64.b64encode(raw).decode()}


def dec(value: dict[str, Any]) -> torch.Tensor:
    raw = base64.b64decode(value["b64"])
    arr = np.frombuffer(raw, DTYPES[value["dtype"]]).reshape(value["shape"]).copy()
    return torch.from_numpy(arr)


# (segments as (modality, data, fields), want, options) per example
CASES: dict[str, tuple[list[tuple[str, Any, dict[str, Any]]], list[str], dict]] = {
    "llama": ([("text", "hello there", {})], ["text"], {}),
    "pi05": ([("image", IMAGES, {"prompt": "pick up the cup"})], ["action"], {}),
    "vjepa2_ac": (
        [("video", VIDEO, {"actions": ACTIONS, "states": STATES})],
        ["tensor"],
        {"rollout": True, "stream_rollout": True, "horizon": 3},
    ),
    "wan22": ([("text", "a cat surfing", {})], ["video"], {}),
    "whisper": ([("audio", CLIP, {})], ["text"], {}),
}
# what each answer holds: (flow, walk, modality) -> (count, shape of each)
EXPECT = {
    "pi05": {("main", "action_gen", "action"): (1, [50, 32])},
    "vjepa2_ac": {("main", "prefill_video_rollout_streaming", "tensor"): (3, [16, 32])},
}
CHAT_ROUTES = {"llama": True, "whisper": True, "pi05": False, "vjepa2_ac": False, "wan22": False}


def native_body(case) -> dict[str, Any]:
    segments, want, options = case
    inputs = []
    for modality, data, fields in segments:
        seg: dict[str, Any] = {"modality": modality}
        seg["data"] = enc(data) if isinstance(data, torch.Tensor) else data
        seg["fields"] = {k: enc(v) if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
        inputs.append(seg)
    return {"inputs": inputs, "want": want, "options": options, "seed": 7}


def by_key(outs: list[tuple[str, str, str, torch.Tensor | None]]) -> dict[tuple, list]:
    out: dict[tuple, list] = {}
    for flow, walk, modality, value in outs:
        out.setdefault((flow, walk, modality), []).append(value)
    return out


def same(a: dict[tuple, list], b: dict[tuple, list]) -> bool:
    return a.keys() == b.keys() and all(
        len(a[k]) == len(b[k])
        and all(
            (x is None and y is None)
            or (x is not None and y is not None and x.dtype == y.dtype and torch.equal(x, y))
            for x, y in zip(a[k], b[k], strict=True)
        )
        for k in a
    )


@pytest.fixture(scope="module", params=sorted(CASES))
def example(request):
    with served(f"generated/{request.param}/cpu") as s:
        yield request.param, s


@pytest.mark.slow
def test_every_example_is_served_and_equals_the_python_client(example) -> None:
    name, s = example
    body = native_body(CASES[name])
    status, reply = s.post(NATIVE, body, timeout=120)
    assert status == 200, reply
    served_outs = by_key(
        [(o["flow"], o["walk"], o["modality"], dec(o["value"])) for o in reply["outputs"]]
    )
    assert served_outs and all(m in body["want"] for _, _, m in served_outs)
    for key, (count, shape) in EXPECT.get(name, {}).items():
        assert [list(v.shape) for v in served_outs[key]] == [shape] * count

    segments, want, options = CASES[name]
    with Client(s.client_address) as client:
        inputs = [(m, d, f) if f else (m, d) for m, d, f in segments]
        got = client.submit(inputs, want, options, deadline=120, seed=7).collect()
    direct = by_key([(o.flow, o.walk, o.modality, o.value) for o in got])
    assert same(served_outs, direct), (served_outs.keys(), direct.keys())


@pytest.mark.slow
def test_streamed_outputs_arrive_as_they_are_emitted(example) -> None:
    """NDJSON carries the same outputs, one event each, then ``done`` with their count."""
    name, s = example
    body = {**native_body(CASES[name]), "stream": "ndjson"}
    status, _, raw = s.request("POST", NATIVE, body, timeout=120)
    assert status == 200
    events = [json.loads(line) for line in raw.decode().splitlines()]
    outputs = [e for e in events if e["event"] == "output"]
    assert events[-1] == {**events[-1], "event": "done", "outputs": len(outputs)}
    _, reply = s.post(NATIVE, native_body(CASES[name]), timeout=120)
    assert [dec(o["value"]).tolist() for o in outputs] == [
        dec(o["value"]).tolist() for o in reply["outputs"]
    ]


@pytest.mark.slow
def test_each_example_gets_the_openai_routes_its_flows_allow(example) -> None:
    name, s = example
    info = s.get_json("/v1/wgc/model")
    assert (CHAT in info["routes"]) is CHAT_ROUTES[name]
    if not CHAT_ROUTES[name]:
        status, reply = s.post(CHAT, {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 404 and f"`{name}` " in reply["error"]["message"]
        return
    if name == "llama":
        content: Any = "hello there"
    else:  # whisper: the clip as a WAV
        pcm = io.BytesIO()
        with wave.open(pcm, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((CLIP.numpy() * 32767).astype("<i2").tobytes())
        data = base64.b64encode(pcm.getvalue()).decode()
        content = [{"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]
    status, reply = s.post(CHAT, {"messages": [{"role": "user", "content": content}], "seed": 7})
    assert status == 200, reply
    assert reply["object"] == "chat.completion" and reply["model"] == name
    assert isinstance(reply["choices"][0]["message"]["content"], str)
    assert reply["usage"]["completion_tokens"] > 0
