"""`wgc run` (a conductor and one worker process per rank) on every CPU placement of the speech
examples writes the reference pipelines' audio: the WAV file's samples are the reference
waveform's (transformers' and snac's modules driven by hand in this process, on the same tiny
checkpoints, seed and options) to within one 16-bit step, and the same samples on every
placement; Qwen3-Omni's text on stdout is the reference's tokens through the tokenizer. And the
README's first command writes seconds of 24 kHz speech-model audio."""

from __future__ import annotations

import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytest.importorskip("snac")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
]

from tests.e2e.speech_support import PLACEMENTS, orpheus, qwen3_omni, reference  # noqa: E402
from wgc.cli.run_outputs import pcm16  # noqa: E402
from wgc_models._shared.speech import text_codec  # noqa: E402

SEED = 5
REQUESTS = {  # family -> (text, options, wants)
    "orpheus": ("hello there", {"temperature": 0.8, "top_p": 0.9, "max_tokens": 63}, ["audio"]),
    "qwen3_omni": (
        "hello",
        {"repetition_penalty": 1.5, "max_tokens": 6, "max_frames": 30},
        ["text", "audio"],
    ),
}


def wgc(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`wgc` as a user runs it; stdout and stderr as UTF-8 text, newlines untranslated (the
    text a model writes may hold any character)."""
    exe = Path(sys.executable).with_name("wgc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, timeout=timeout, env=env)
    return subprocess.CompletedProcess(
        r.args, r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    )


def samples(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getframerate() == 24_000 and w.getsampwidth() == 2 and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int32)


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    return {
        "orpheus": orpheus(tmp_path_factory.mktemp("orpheus")),
        "qwen3_omni": qwen3_omni(tmp_path_factory.mktemp("omni")),
    }


@pytest.fixture(scope="module")
def runs(families, tmp_path_factory) -> dict[tuple[str, str], tuple[np.ndarray, str]]:
    out = {}
    for name, family in families.items():
        text, options, wants = REQUESTS[name]
        for placement in PLACEMENTS:
            plan = family.compile(tmp_path_factory.mktemp(f"{name}-{placement}"), placement)
            wav = tmp_path_factory.mktemp(f"{name}-{placement}-out")
            args = ["run", str(plan), "--input", f"text={text}", "--seed", str(SEED)]
            args += ["-o", str(wav)]
            for w in wants:
                args += ["--want", w]
            for k, v in options.items():
                args += ["--option", f"{k}={v}"]
            r = wgc(*args)
            assert r.returncode == 0, r.stderr
            assert "first audio after" in r.stderr and "real-time factor" in r.stderr
            out[(name, placement)] = (samples(wav / "audio.wav"), r.stdout)
    return out


@pytest.mark.parametrize("family", list(REQUESTS))
def test_wgc_run_writes_the_reference_audio_on_every_placement(families, runs, family) -> None:
    text, options, _ = REQUESTS[family]
    ref = reference(families[family], text, options, "any-id", SEED)
    want = pcm16(ref.audio.numpy())[:, 0].astype(np.int32)
    first, _ = runs[(family, PLACEMENTS[0])]
    assert first.shape == want.shape and first.size > 12_000  # half a second and more
    assert np.abs(first - want).max() <= 1  # one 16-bit step: float rounding
    assert first.std() > 300  # a signal, not silence
    for placement in PLACEMENTS[1:]:
        got, _ = runs[(family, placement)]
        assert np.array_equal(got, first), placement
    if family == "qwen3_omni":
        said = text_codec("", "qwen3_omni").decode(ref.tokens)
        assert all(runs[(family, p)][1] == said + "\n" for p in PLACEMENTS)


def test_the_readme_command_writes_seconds_of_speech_model_audio(tmp_path) -> None:
    out = tmp_path / "out"
    r = wgc(
        "run", "wgc_models/orpheus/orpheus.walk", "--input", "text=hello", "--want", "audio",
        "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = samples(out / "audio.wav")
    assert got.size == 37 * 2048  # `max_tokens` 280: 40 SNAC frames less 3, 3.16 s
    assert 1000 < got.std() < 20_000 and np.abs(got).max() < 32767  # speech-like, not clipped
    assert "wgc: audio: 3.16 s at 24000 Hz in 37 chunks" in r.stderr
    assert "clipped" not in r.stderr
