"""What `wgc run` reports about a request's audio when it ends: how long it is, at what rate,
in how many chunks, how soon the first chunk came (first-audio latency, from the request's
submission), the real-time factor (seconds of work per second of audio, from submission to
the last output: below 1 is faster than real time), and how many samples fell outside
[-1, 1] (the WAV file clips them: said, never silent)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class AudioStats:
    rate: int
    samples: int = 0
    chunks: int = 0
    clipped: int = 0
    first: float | None = None  # seconds after submission


@dataclass(slots=True)
class RequestStats:
    """Per emitted audio modality, as outputs arrive (`add`)."""

    clock: Any = time.monotonic
    submitted: float | None = None
    last: float | None = None
    audio: dict[str, AudioStats] = field(default_factory=dict)

    def submit(self) -> None:
        self.submitted = self.clock()

    def expect(self, modality: str, rate: int) -> None:
        """``modality`` is wanted: reported even when no chunk of it arrives."""
        self.audio.setdefault(modality, AudioStats(rate))

    def add(self, modality: str, samples: Any, rate: int) -> None:
        """One audio chunk (a numpy array of samples) of ``modality`` at ``rate`` Hz."""
        now = self.clock()
        self.last = now
        a = self.audio.setdefault(modality, AudioStats(rate))
        n = int(samples.size)
        if n == 0:
            return
        a.samples += n if samples.ndim <= 1 else max(samples.shape)  # [samples, channels]
        a.chunks += 1
        if samples.dtype.kind == "f":
            a.clipped += int((abs(samples) > 1.0).sum())
        if a.first is None and self.submitted is not None:
            a.first = now - self.submitted

    def lines(self) -> list[str]:
        out = []
        for modality, a in self.audio.items():
            if a.samples == 0:
                out.append(f"wgc: {modality}: no samples (the request ended before any audio)")
                continue
            seconds = a.samples / a.rate
            text = (
                f"wgc: {modality}: {seconds:.2f} s at {a.rate} Hz in {a.chunks} "
                f"chunk{'s' if a.chunks != 1 else ''}"
            )
            if a.first is not None and self.submitted is not None and self.last is not None:
                rtf = (self.last - self.submitted) / seconds
                text += f"; first audio after {a.first:.2f} s; real-time factor {rtf:.2f}"
            out.append(text)
            if a.clipped:
                share = 100 * a.clipped / a.samples
                out.append(
                    f"warning: {a.clipped} samples of `{modality}` ({share:.2f}%) were outside "
                    "[-1, 1] and are clipped in its WAV file"
                )
        return out
