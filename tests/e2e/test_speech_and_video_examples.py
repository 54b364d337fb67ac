"""The Whisper and Wan2.2 examples end to end: on the reference interpreter, on the in-process
cluster on both placements (matching the interpreter exactly), refused at the door outside
their options' values and shape buckets, and as processes (`wgc run`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.narrow import all_present, present

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the node modules import as `wgc_models.<family>`
    sys.path.insert(0, str(ROOT))

from wgc.interp import (  # noqa: E402
    load_model,
    load_nodes,
    make_request,
    run_request,
    same_outputs,
    segment,
)
from wgc.interp.request import Emitted, Outputs  # noqa: E402
from wgc.ir.model import Model  # noqa: E402
from wgc_runtime.core.conductor.door import check  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402

MODELS: dict[str, Model] = {}
CLIP = torch.sin(torch.linspace(0, 200, 16000)) * 0.5
FRAME = torch.arange(128 * 112 * 3).reshape(128, 112, 3).remainder(251).to(torch.uint8)


def model(family: str) -> Model:
    if family not in MODELS:
        MODELS[family] = load_model(str(ROOT / "wgc_models" / family / f"{family}.walk"))
    return MODELS[family]


def cluster(family: str, placement: str) -> LocalCluster:
    m = model(family)

    def build(rank):
        return load_nodes(m, {n.name for n in rank.nodes}, rank.device)

    return LocalCluster(ROOT / "generated" / family / placement, nodes_factory=build)


SCENARIOS = {
    "whisper": {
        "transcribe": ([segment("audio", CLIP)], ["text"], {}),
        "german_with_prompt": (
            [segment("text", "names: Ada"), segment("audio", CLIP)],
            ["text"],
            {"language": "de", "max_tokens": 5},
        ),
        "two_windows_translated": (
            [segment("audio", CLIP), segment("audio", CLIP[:8000])],
            ["text"],
            {"task": "translate", "language": "ja", "max_tokens": 4},
        ),
        "windows_reported": (  # a prompt, then three windows, each one reported
            [
                segment("text", "hi"),
                segment("audio", CLIP),
                segment("audio", CLIP[:8000]),
                segment("audio", CLIP[:4000]),
            ],
            ["text", "tensor"],
            {"language": "en", "max_tokens": 3},
        ),
    },
    "wan22": {
        "t2v": ([segment("text", "a cat surfing")], ["video"], {}),
        "t2v_large": (
            [segment("text", "a cat surfing")],
            ["video"],
            {"frames": 33, "height": 128, "width": 112, "negative_prompt": "blurry"},
        ),
        "i2v": (
            [segment("text", "the cat jumps"), segment("image", FRAME)],
            ["video"],
            {"mode": "i2v", "height": 128, "width": 112},
        ),
    },
}
PLACEMENTS = {"whisper": ("cpu", "cpu-2rank"), "wan22": ("cpu", "cpu-3rank")}
CASES = [
    pytest.param(f, p, n, id=f"{f}-{p}-{n}")
    for f, scenarios in SCENARIOS.items()
    for p in PLACEMENTS[f]
    for n in scenarios
]


def test_whisper_transcribes_each_window_until_end_of_text() -> None:
    """One text item per chosen token (its UTF-8 bytes; none for the end of text), at most
    ``max_tokens`` a window, and the tiny model's generation settings' 24 by default."""
    inputs, want, options = SCENARIOS["whisper"]["two_windows_translated"]
    out = run_request(model("whisper"), make_request(model("whisper"), inputs, want, options))
    assert out.ok, out.error
    pieces = all_present(out.of("text"))
    assert 2 <= len(pieces) <= 2 * 4 and all(t.dtype == torch.uint8 for t in pieces)
    first = run_request(
        model("whisper"), make_request(model("whisper"), *SCENARIOS["whisper"]["transcribe"])
    )
    assert 1 <= len(first.of("text")) <= 24
    assert b"".join(
        bytes(t.tolist()) for t in all_present(first.of("text"))
    )  # the random model speaks
    assert not first.of("tensor")  # windows are reported only to a client that wants tensors


def test_each_window_reports_its_index_and_its_text_items() -> None:
    """``report``'s ``window`` after each window: its index among the audio segments (the
    prompt is not one) and how many text items it emitted; they add up to all of them."""
    out = run_request(model("whisper"), make_request(model("whisper"), *SCENARIOS["whisper"][
        "windows_reported"]))  # fmt: skip
    assert out.ok, out.error
    records = [present(e.value).tolist() for e in out.emitted if e.channel == "window"]
    assert [i for i, _ in records] == [0, 1, 2] and all(n == 3 for _, n in records)
    assert sum(n for _, n in records) == len(out.of("text"))
    # and each window's language, as a code (the request's here; `auto`: the one detected)
    codes = [bytes(v.tolist()).decode() for e in out.emitted
             if e.channel == "detected" and (v := e.value) is not None]  # fmt: skip
    assert codes == ["en"] * 3


def test_whisper_options_change_the_transcript_and_english_translation_fails() -> None:
    m = model("whisper")
    base = run_request(m, make_request(m, [segment("audio", CLIP)], ["text"], {}))
    german = run_request(m, make_request(m, [segment("audio", CLIP)], ["text"], {"language": "de"}))
    assert not same_outputs(base, german)
    bad = run_request(
        m,
        make_request(
            m, [segment("audio", CLIP)], ["text"], {"task": "translate", "language": "en"}
        ),
    )
    assert not bad.ok and "translation is into English" in present(bad.error).message
    none = run_request(m, make_request(m, [segment("text", "hi")], ["text"], {}))
    assert not none.ok and "send the audio" in present(none.error).message


def test_wan22_video_has_the_bucket_shape_and_per_mode_defaults() -> None:
    m = model("wan22")
    for name, shape in (("t2v", (17, 64, 64, 3)), ("t2v_large", (33, 128, 112, 3))):
        inputs, want, options = SCENARIOS["wan22"][name]
        out = run_request(m, make_request(m, inputs, want, options))
        assert out.ok, out.error
        (video,) = all_present(out.of("video"))
        assert video.shape == shape and video.dtype == torch.uint8
    i2v = make_request(m, *SCENARIOS["wan22"]["i2v"])
    assert i2v.option("guidance") == 3.5 and i2v.option("shift") == 5.0
    t2v = make_request(m, *SCENARIOS["wan22"]["t2v"])
    assert t2v.option("guidance") == 4.0 and t2v.option("shift") == 12.0
    no_frame = run_request(m, make_request(m, [segment("text", "x")], ["video"], {"mode": "i2v"}))
    assert not no_frame.ok and "one image" in present(no_frame.error).message


@pytest.mark.parametrize(("family", "placement", "name"), CASES)
def test_runtime_matches_the_reference_interpreter(family, placement, name) -> None:
    inputs, want, options = SCENARIOS[family][name]
    c = cluster(family, placement)
    req = make_request(model(family), inputs, want, options)
    ref = run_request(
        model(family),
        req,
        placed=set(c.spec.placed),
        request_id="request-0",
        kv_dtype=c.spec.kv_cache.dtype,
    )
    assert ref.ok, ref.error
    h = c.submit(req, "request-0").result()
    got = Outputs()
    for o in h.outputs:
        got.emitted.append(Emitted(o.meta["flow"], o.meta["walk"], o.modality, o.channel, o.tensor))
    assert h.error is None, h.error
    assert same_outputs(ref, got)


@pytest.mark.parametrize(
    ("family", "options", "problem"),
    [
        ("whisper", {"language": "xx"}, "options.language"),
        ("whisper", {"task": "summarize"}, "options.task"),
        ("wan22", {"height": 100}, "options.height"),
        ("wan22", {"frames": 81}, "options.frames"),
        ("wan22", {"mode": "v2v"}, "options.mode"),
    ],
)
def test_the_door_refuses_values_outside_an_options_list(family, options, problem) -> None:
    c = cluster(family, PLACEMENTS[family][0])
    inputs, want, _ = next(iter(SCENARIOS[family].values()))
    problems = check(c.spec, c.spec.request(inputs, want, options), strict=False)
    assert [p.field for p in problems] == [problem]
    assert "takes" in problems[0].message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "placement", "args"),
    [
        ("whisper", "cpu-2rank", ["-i", "audio={clip}", "--option", "language=fr"]),
        ("wan22", "cpu-3rank", ["-i", "text=a cat", "-i", "image={frame}", "--option", "mode=i2v"]),
    ],
)
def test_wgc_run_as_processes(tmp_path, family, placement, args) -> None:
    clip, frame = tmp_path / "clip.npy", tmp_path / "frame.npy"
    np.save(clip, CLIP.numpy())
    np.save(frame, FRAME[:64, :64].numpy())
    argv = [a.format(clip=clip, frame=frame) for a in args]
    want = "text" if family == "whisper" else "video"
    cmd = [
        str(ROOT / ".venv" / "bin" / "wgc"),
        "run",
        str(ROOT / "wgc_models" / family / f"{family}.walk"),
        "-p",
        str(ROOT / "wgc_models" / family / "placements" / f"{placement}.yaml"),
        *argv,
        "--want",
        want,
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "wgc: " in done.stderr and "output" in done.stderr
