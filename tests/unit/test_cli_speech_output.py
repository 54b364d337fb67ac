"""What `wgc run` tells a user about a speech request: per audio output its length, rate,
chunks, first-audio latency, real-time factor and clipped samples (`wgc.cli.speech_stats`);
the start-up progress (`wgc.cli.progress`); text outputs of UTF-8 bytes split anywhere
(`wgc.cli.run_outputs.OutputWriter`)."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from wgc.cli.progress import StartupProgress
from wgc.cli.run_outputs import OutputWriter
from wgc.cli.speech_stats import RequestStats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stats_report_length_first_audio_and_real_time_factor() -> None:
    clock = Clock()
    stats = RequestStats(clock=clock)
    stats.submit()
    clock.now = 0.5
    stats.add("audio", np.zeros(2048, np.float32), 24_000)
    clock.now = 1.0
    stats.add("audio", np.zeros(0, np.float32), 24_000)  # an empty chunk counts for nothing
    stats.add("audio", np.full(22_000, 0.5, np.float32), 24_000)
    # 24048 samples: 1.002 s; 1.0 s from submission to the last chunk
    assert stats.lines() == [
        "wgc: audio: 1.00 s at 24000 Hz in 2 chunks; first audio after 0.50 s; "
        "real-time factor 1.00"
    ]


def test_stats_say_how_many_samples_are_clipped() -> None:
    stats = RequestStats(clock=Clock())
    stats.submit()
    stats.add("audio", np.array([0.0, 1.5, -2.0, 0.5], np.float32), 16_000)
    first, warning = stats.lines()
    assert first.startswith("wgc: audio: 0.00 s at 16000 Hz in 1 chunk;")
    assert warning == (
        "warning: 2 samples of `audio` (50.00%) were outside [-1, 1] and are clipped in its "
        "WAV file"
    )


def test_stats_of_an_audio_output_without_samples() -> None:
    stats = RequestStats()
    stats.add("audio", np.zeros(0, np.float32), 24_000)
    stats.expect("speech", 16_000)  # wanted, never emitted
    stats.expect("audio", 16_000)  # already seen: its rate stays
    assert stats.audio["audio"].rate == 24_000
    assert stats.lines() == [
        "wgc: audio: no samples (the request ended before any audio)",
        "wgc: speech: no samples (the request ended before any audio)",
    ]


def test_progress_prints_lines_when_not_on_a_terminal() -> None:
    out = io.StringIO()
    progress = StartupProgress(5, out)
    progress("  rank 0: loading `LLM` ...")
    progress("wgc: ready in 1.0 s")
    progress.close()
    assert out.getvalue() == "  rank 0: loading `LLM` ...\nwgc: ready in 1.0 s\n"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_that_counts_finished_steps() -> None:
    pytest.importorskip("tqdm")
    out = Tty()
    progress = StartupProgress(4, out)
    assert progress.bar is not None
    for line in (
        "  rank 0: loading `LLM` ...",
        "  rank 0: loaded `LLM` in 0.1 s",
        "  rank 0: captured 2 step(s) in 0.3 s",
        "  rank 0: ready",
    ):
        progress(line)
    assert progress.bar.n == 3  # loading is a step begun, not done
    progress("wgc: ready in 1.0 s")
    assert progress.bar is None and out.getvalue().endswith("wgc: ready in 1.0 s\n")


def test_text_bytes_split_inside_a_character_print_whole(tmp_path, capsys) -> None:
    writer = OutputWriter(tmp_path, {})
    raw = "héllo ✓".encode()
    for piece in (raw[:2], raw[2:7], raw[7:]):  # cuts inside `é` and inside `✓`
        writer.write("text", np.frombuffer(piece, np.uint8))
    writer.close()
    assert capsys.readouterr().out.startswith("héllo ✓")
    assert (tmp_path / "text.txt").read_text() == "héllo ✓"


def test_a_character_cut_off_at_the_end_is_replaced_not_lost(tmp_path, capsys) -> None:
    writer = OutputWriter(tmp_path, {})
    writer.write("text", np.frombuffer("ok ✓".encode()[:-1], np.uint8))
    writer.close()
    assert capsys.readouterr().out == "ok \ufffd\n"
    assert (tmp_path / "text.txt").read_text() == "ok \ufffd"


def test_audio_is_written_at_its_rate_and_counted(tmp_path) -> None:
    stats = RequestStats()
    writer = OutputWriter(tmp_path, {"audio": 16_000}, stats=stats)
    writer.write("audio", np.linspace(-0.5, 0.5, 1600, dtype=np.float32))
    writer.close()
    with wave.open(str(tmp_path / "audio.wav")) as w:
        assert w.getframerate() == 16_000 and w.getnframes() == 1600
    assert stats.audio["audio"].samples == 1600 and stats.audio["audio"].rate == 16_000
