"""Inputs checked at the edge (issue 14 point 5), on the command line: every malformed or
oversized `wgc run` input (``--input`` files and values, ``--request FILE.json``, ``-o``,
``--limit``) exits 1 with a message naming it and the reason, never 2 (an internal error); a
lowered ``--limit`` refuses what the default accepts. The readers are
`wgc_runtime.host.inputs`, the ones the HTTP server uses too (`test_serve_input_edge`).
"""

from __future__ import annotations

import io
import json
import struct
import wave
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.e2e.real_support import compile_to
from wgc.cli import main
from wgc.config import Env
from wgc_runtime.host.inputs import (
    InputError,
    Limits,
    check_json,
    decode_wav,
    depth_of,
    read_file,
)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    """The llama example on the CPU placement: one text input, `prompt: i64[T]`."""
    return str(compile_to(tmp_path_factory.mktemp("llama"), "llama", "cpu", {}))


def png(width: int, height: int, data: bytes = b"") -> bytes:
    """A PNG whose header says ``width`` x ``height`` (grey, 8-bit); ``data`` its pixel rows
    (compressed here), or nothing: a decompression bomb's header with no pixels behind it."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(data or b"\0" * 1000)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(seconds * rate))
    return out.getvalue()


def npy(x: np.ndarray, allow_pickle: bool = False) -> bytes:
    out = io.BytesIO()
    np.save(out, x, allow_pickle=allow_pickle)
    return out.getvalue()


def small_png() -> bytes:
    return png(4, 4, b"".join(b"\0" + bytes(range(4)) for _ in range(4)))


def deep(n: int) -> str:
    return "[" * n + "]" * n


def request(data: str) -> bytes:
    """A request file of one text segment whose ``data`` is the JSON text ``data``."""
    return f'{{"inputs": [{{"modality": "text", "data": {data}}}]}}'.encode()


# name -> (files to write: name -> bytes, args after `wgc run LLAMA --local`, message)
Files = dict[str, bytes]
CASES: dict[str, tuple[Callable[[], Files], list[str], str]] = {
    "corrupt npy": (
        lambda: {"x.npy": b"\x93NUMPY garbage"},
        ["--input", "text={d}/x.npy"],
        "x.npy`: not a .npy file",
    ),
    "object-array npy": (
        lambda: {"x.npy": npy(np.array([{"a": 1}], dtype=object), allow_pickle=True)},
        ["--input", "text={d}/x.npy"],
        "holds `object` values; an input array holds numbers",
    ),
    "string npy": (
        lambda: {"x.npy": npy(np.array(["a", "b"]))},
        ["--input", "text={d}/x.npy"],
        "holds `<U1` values",
    ),
    "npy shorter than its header": (
        lambda: {"x.npy": npy(np.arange(3))[:-8]},
        ["--input", "text={d}/x.npy"],
        "the header says 3 `int64` values (24 bytes), the file holds 16 bytes",
    ),
    "npy header of 10^12 values": (
        lambda: {"x.npy": npy(np.zeros(2)).replace(b"(2,)", b"(1000000000000,)")},
        ["--input", "text={d}/x.npy"],
        "element count is 1,000,000,000,000, over the limit of 100,000,000 (`array_elements`)",
    ),
    "float npy where the port is i64[T]": (
        lambda: {"x.npy": npy(np.array([1.5, 2.0], np.float32))},
        ["--input", "text={d}/x.npy"],
        "expected dtype i64, got f32[2]",
    ),
    "corrupt wav": (
        lambda: {"x.wav": b"RIFF\0\0\0\0WAVEjunk"},
        ["--input", "text={d}/x.wav"],
        "x.wav`: not a PCM WAV",
    ),
    "non-UTF-8 text file": (
        lambda: {"x.txt": b"\xff\xfe\x00bad"},
        ["--input", "text={d}/x.txt"],
        "x.txt`: not UTF-8 text (byte 0xff at offset 0)",
    ),
    "text over text_chars": (
        lambda: {"x.txt": b"a" * 1_000_001},
        ["--input", "text={d}/x.txt"],
        "length in characters is 1,000,001, over the limit of 1,000,000 (`text_chars`)",
    ),
    "unsupported file kind": (
        lambda: {"x.csv": b"1,2"},
        ["--input", "text={d}/x.csv"],
        "cannot read `.csv` files",
    ),
    "PNG decompression bomb": (
        lambda: {"x.png": png(100_000, 100_000)},
        ["--input", "image={d}/x.png"],
        "x.png`: a decompression bomb",
    ),
    "PNG over image_pixels": (
        lambda: {"x.png": png(8000, 6000)},
        ["--input", "image={d}/x.png"],
        "pixel count (8000 x 6000) is 48,000,000, over the limit of 40,000,000 (`image_pixels`)",
    ),
    "truncated PNG": (
        lambda: {"x.png": png(4, 4)[:30]},
        ["--input", "image={d}/x.png"],
        "x.png`: not an image",
    ),
    "-o naming an existing file": (
        lambda: {"out": b"x"},
        ["--input", "text=hi", "-o", "{d}/out"],
        "out`: is a file, not a folder",
    ),
    "-o under a file": (
        lambda: {"out": b"x"},
        ["--input", "text=hi", "-o", "{d}/out/sub"],
        "cannot make the folder",
    ),
    "request nested too deep": (
        lambda: {"r.json": request(deep(5000))},
        ["--request", "{d}/r.json"],
        "r.json`: its nesting depth is over what the parser takes, and over the limit of 64",
    ),
    "request nested over json_depth": (
        lambda: {"r.json": request(deep(200))},
        ["--request", "{d}/r.json"],
        "r.json`: its nesting depth is 203, over the limit of 64 (`json_depth`)",
    ),
    "request not JSON": (
        lambda: {"r.json": b'{"inputs": [}'},
        ["--request", "{d}/r.json"],
        "r.json`: not JSON",
    ),
    "request not UTF-8": (
        lambda: {"r.json": b'{"inputs": "\xff"}'},
        ["--request", "{d}/r.json"],
        "r.json`: not JSON",
    ),
    "request with a 5,001-digit integer": (
        lambda: {"r.json": b'{"inputs": [{"modality": "text", "data": 1' + b"0" * 5000 + b"}]}"},
        ["--request", "{d}/r.json"],
        "r.json`: not JSON",
    ),
    "request naming a corrupt wav": (
        lambda: {
            "r.json": b'{"inputs": [{"modality": "text", "data": "a.wav"}]}',
            "a.wav": b"RIFF",
        },
        ["--request", "{d}/r.json"],
        "inputs[0].data: not a PCM WAV",
    ),
    "field nested too deep": (
        lambda: {},
        ["--input", f"text=hi,goal={deep(100)}"],
        "its nesting depth is 100, over the limit of 64 (`json_depth`)",
    ),
    "an option nested past the parser": (
        lambda: {},
        ["--input", "text=hi", "--option", "x=" + deep(60_000)],
        "unknown option `x`",  # it is text then, and the door reads it
    ),
    "an unknown limit": (
        lambda: {},
        ["--input", "text=hi", "--limit", "nope=1"],
        "`--limit nope=1`: unknown limit (one of file_bytes, text_chars",
    ),
    "a limit that is not a number": (
        lambda: {},
        ["--input", "text=hi", "--limit", "text_chars=many"],
        "`--limit text_chars=many`: expected a number",
    ),
    "a limit of zero": (
        lambda: {},
        ["--input", "text=hi", "--limit", "json_depth=0"],
        "a limit is a positive number",
    ),
    # a lowered limit refuses what the default accepts (`test_the_defaults_accept_...`)
    "text over a lowered text_chars": (
        lambda: {},
        ["--input", "text=hello", "--limit", "text_chars=4"],
        "`--input text=hello`: the text's length in characters is 5, over the limit of 4",
    ),
    "wav over a lowered audio_seconds": (
        lambda: {"a.wav": wav(1.0)},
        ["--input", "text={d}/a.wav", "--limit", "audio_seconds=0.5"],
        "a.wav`: its length in seconds is 1.0, over the limit of 0.5 (`audio_seconds`)",
    ),
    "image over a lowered image_pixels": (
        lambda: {"a.png": small_png()},
        ["--input", "image={d}/a.png", "--limit", "image_pixels=15"],
        "pixel count (4 x 4) is 16, over the limit of 15",
    ),
    "npy over a lowered file_bytes": (
        lambda: {"a.npy": npy(np.arange(3))},
        ["--input", "text={d}/a.npy", "--limit", "file_bytes=100"],
        "a.npy`: its size in bytes is 152, over the limit of 100 (`file_bytes`)",
    ),
    "request over a lowered request_bytes": (
        lambda: {"r.json": b'{"inputs": [{"modality": "text", "data": "hi"}]}'},
        ["--request", "{d}/r.json", "--limit", "request_bytes=10"],
        "r.json`: its size in bytes is 48, over the limit of 10 (`request_bytes`)",
    ),
    "field over a lowered json_depth": (
        lambda: {},
        ["--input", "text=hi,goal=[[1]]", "--limit", "json_depth=1"],
        "its nesting depth is 2, over the limit of 1",
    ),
}


def wgc_run(plan: str, args: list[str]):
    return CliRunner().invoke(main, ["run", plan, "--local", *args], obj=Env())


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_exits_1_naming_it_and_why(case: str, llama: str, tmp_path: Path) -> None:
    make, args, message = CASES[case]
    for name, raw in make().items():
        (tmp_path / name).write_bytes(raw)
    result = wgc_run(llama, [a.replace("{d}", str(tmp_path)) for a in args])
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert "internal compiler error" not in result.output
    assert message in result.output, result.output


def test_a_100_mb_prompt_is_refused_unread(llama: str, tmp_path: Path) -> None:
    huge = tmp_path / "prompt.txt"
    with huge.open("wb") as f:
        f.truncate(100 << 20)  # sparse: nothing is written, and nothing need be read
    result = wgc_run(llama, ["--input", f"text={huge}"])
    assert result.exit_code == 1, result.output
    assert "size in bytes is 104,857,600" in result.output and "`text_chars`" in result.output


def test_the_defaults_accept_what_the_lowered_limits_refuse(llama: str, tmp_path: Path) -> None:
    """The same inputs as the "lowered" cases read under the default limits."""
    files = {"a.wav": wav(1.0), "a.png": small_png(), "a.npy": npy(np.arange(3))}
    for name, raw in files.items():
        (tmp_path / name).write_bytes(raw)
    x, fields = read_file(tmp_path / "a.wav", "a.wav", Limits())
    assert x.shape == (8000,) and fields == {"sample_rate": 8000}
    assert read_file(tmp_path / "a.png", "a.png", Limits())[0].shape == (4, 4, 3)
    assert read_file(tmp_path / "a.npy", "a.npy", Limits())[0].tolist() == [0, 1, 2]
    result = wgc_run(llama, ["--input", "text=hello,goal=[[1]]"])  # and it runs
    assert result.exit_code == 0, result.output
    assert "outputs in" in result.output


def test_a_streamed_wav_is_as_long_as_its_bytes() -> None:
    """A WAV whose header gives its sizes as unknown (0xFFFFFFFF, as `wgc serve` streams it)
    is read as long as the samples really there, and bounded by them."""
    header = wav(0.0)[:40] + struct.pack("<I", 0xFFFFFFFF)  # `data` chunk of unknown size
    raw = header[:4] + struct.pack("<I", 0xFFFFFFFF) + header[8:] + b"\1\0" * 800
    x, rate = decode_wav(raw, "streamed.wav", Limits())
    assert x.shape == (800, 1) and rate == 8000
    with pytest.raises(InputError, match=r"length in seconds is 0\.1, over the limit of 0\.05"):
        decode_wav(raw, "streamed.wav", Limits(audio_seconds=0.05))


def test_limits_parse_and_bound() -> None:
    limits = Limits().with_pairs([("text_chars", "10"), ("audio_seconds", "2.5")])
    assert (limits.text_chars, limits.audio_seconds) == (10, 2.5)
    assert limits.image_pixels == Limits().image_pixels
    with pytest.raises(InputError, match="expected a number"):
        Limits().with_pairs([("text_chars", "2.5")])  # an int limit


def test_json_depth_is_measured_at_any_depth() -> None:
    assert depth_of(json.loads('{"a": [1, {"b": "[[[[["}], "c": 2}')) == 3
    assert depth_of(3) == 0
    nested: list = []
    for _ in range(100_000):  # deeper than any recursion would go
        nested = [nested]
    assert depth_of(nested) == 100_001
    check_json(b'{"a": "[[[[[[[[[[["}', "x", Limits(json_depth=2))  # brackets in a string
    check_json(b"[[[[not json", "x", Limits(json_depth=2))  # left to the parser to say
    with pytest.raises(InputError, match="nesting depth is 3, over the limit of 2"):
        check_json(b"[[[]]]", "x", Limits(json_depth=2))
