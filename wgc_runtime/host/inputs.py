"""Inputs checked at the edge: every reader of user data, bounded by one typed `Limits`.

`wgc run` (its ``--input`` files and values, its ``--request FILE.json``) and the HTTP server
(JSON bodies, ``data:`` URLs, base64 images and audio, uploads) read user data only through
this module, so both refuse the same things the same way: a malformed or oversized input
raises `InputError` whose message names the input (``where``: the file or the body's field)
and the reason. The CLI turns it into exit 1, the server into HTTP 400 (413 for a body over
``request_bytes``). Nothing here trusts a header: sizes are checked against the bytes that are
really there before anything is allocated, ``.npy`` files are read without pickle, images are
bounded in pixels before they are decoded (a decompression bomb never expands).

The limits (`Limits`; ``wgc run/serve --limit NAME=VALUE`` sets them per deployment):

==================  ===============  =========================================================
name                default          bounds
==================  ===============  =========================================================
``file_bytes``      256 MiB          one input file (``.npy``, ``.wav``, image, ``.txt``) or
                                     one decoded ``data:`` URL / base64 payload
``text_chars``      1,000,000        one text value (a prompt, a ``.txt`` file, a field)
``image_pixels``    40,000,000       width x height of one image (before it is decoded)
``audio_seconds``   3,600            one WAV (frames / sample rate, from the bytes present)
``json_depth``      64               nesting of ``[`` / ``{`` in a request file or body
``request_bytes``   64 MiB           a ``--request`` file, or one HTTP request body
``array_elements``  100,000,000      elements of one array (``.npy``, JSON tensor, list)
``segments``        10,000           input segments of one request (chat: content parts)
==================  ===============  =========================================================
"""

from __future__ import annotations

import io
import json
import struct
import wave
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1 << 20


class InputError(ValueError):
    """User input that cannot be read or is over a limit; the message is ``where: why``."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one input may be (see the module docstring's table)."""

    file_bytes: int = 256 * MiB
    text_chars: int = 1_000_000
    image_pixels: int = 40_000_000
    audio_seconds: float = 3600.0
    json_depth: int = 64
    request_bytes: int = 64 * MiB
    array_elements: int = 100_000_000
    segments: int = 10_000

    def with_pairs(self, pairs: list[tuple[str, str]]) -> Limits:
        """These limits with ``NAME=VALUE`` pairs applied (``--limit``); an unknown name or a
        value that is not a positive number raises `InputError`."""
        kinds = {f.name: f.type for f in fields(self)}
        changes: dict[str, Any] = {}
        for name, text in pairs:
            if name not in kinds:
                known = ", ".join(kinds)
                raise InputError(f"`--limit {name}={text}`: unknown limit (one of {known})")
            try:
                value: float = float(text) if kinds[name] == "float" else int(text)
            except ValueError:
                raise InputError(f"`--limit {name}={text}`: expected a number") from None
            if value <= 0:
                raise InputError(f"`--limit {name}={text}`: a limit is a positive number")
            changes[name] = value
        return replace(self, **changes)


# ---------------------------------------------------------------- checks of values


def over(where: str, what: str, got: float, limit: float, name: str) -> InputError:
    return InputError(f"{where}: {what} is {got:,}, over the limit of {limit:,} (`{name}`)")


def check_text(text: str, where: str, limits: Limits) -> str:
    if len(text) > limits.text_chars:
        raise over(
            where, "the text's length in characters", len(text), limits.text_chars, "text_chars"
        )
    return text


def check_elements(n: int, where: str, limits: Limits) -> None:
    if n > limits.array_elements:
        raise over(where, "the array's element count", n, limits.array_elements, "array_elements")


def check_value(value: Any, where: str, limits: Limits) -> None:
    """A decoded segment's data or field: text within ``text_chars``, arrays within
    ``array_elements``."""
    if isinstance(value, str):
        check_text(value, where, limits)
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        check_elements(int(np.prod(tuple(value.shape), dtype=np.int64)), where, limits)


def check_segments(n: int, where: str, limits: Limits) -> None:
    """A request's segment count within ``segments`` (before any segment is decoded)."""
    if n > limits.segments:
        raise over(where, "its segment count", n, limits.segments, "segments")


def check_bytes(n: int, where: str, limits: Limits, name: str = "file_bytes") -> None:
    limit = getattr(limits, name)
    if n > limit:
        raise over(where, "its size in bytes", n, limit, name)


# ---------------------------------------------------------------- files


def read_bytes(path: Path, where: str, limits: Limits, name: str = "file_bytes") -> bytes:
    """A file's bytes, refused before reading when it is over ``limits.<name>``."""
    try:
        size = path.stat().st_size
        check_bytes(size, where, limits, name)
        with path.open("rb") as f:
            raw = f.read(getattr(limits, name) + 1)  # a file that grew since stat
    except OSError as exc:
        raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    check_bytes(len(raw), where, limits, name)
    return raw


def decode_text(raw: bytes, where: str, limits: Limits) -> str:
    """UTF-8 bytes as text (a BOM dropped), within ``text_chars``."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    return check_text(text, where, limits)


NUMERIC_KINDS = "biuf"  # bool, int, unsigned, float: what a tensor can hold


def decode_npy(raw: bytes, where: str, limits: Limits) -> np.ndarray:
    """A ``.npy`` file's array, never through pickle: its header is checked first (a numeric
    dtype, the element count within ``array_elements``, exactly as many data bytes as the
    header says)."""
    f = io.BytesIO(raw)
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except Exception as exc:  # numpy parses the header with ast.literal_eval,
        # which raises any of a dozen kinds (ValueError, SyntaxError, tokenize.TokenError ...)
        raise InputError(f"{where}: not a .npy file ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject or dtype.kind not in NUMERIC_KINDS or dtype.fields is not None:
        never = " (object arrays are never loaded: no pickle)" if dtype.hasobject else ""
        raise InputError(
            f"{where}: holds `{dtype}` values; an input array holds numbers (bool, int, uint, "
            f"float){never}"
        )
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    check_elements(count, where, limits)
    data = raw[f.tell() :]
    if len(data) != count * dtype.itemsize:
        raise InputError(
            f"{where}: the header says {count:,} `{dtype}` values ({count * dtype.itemsize:,} "
            f"bytes), the file holds {len(data):,} bytes of data"
        )
    x = np.frombuffer(data, dtype=dtype, count=count)
    x = x.reshape(shape[::-1]).transpose() if fortran else x.reshape(shape)
    return x.astype(dtype.newbyteorder("="), copy=True)


def decode_wav(raw: bytes, where: str, limits: Limits) -> tuple[np.ndarray, int]:
    """A PCM WAV as f32 ``[samples, channels]`` in [-1, 1] and its sample rate; its length
    (from the bytes really present, a streamed header's unknown size included) within
    ``audio_seconds``."""
    check_bytes(len(raw), where, limits)
    try:
        with wave.open(io.BytesIO(raw), "rb") as w:
            width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
            if channels < 1 or rate < 1:
                raise wave.Error(f"{channels} channels at {rate} Hz")
            frames = min(w.getnframes(), len(raw) // (width * channels or 1))
            if frames / rate > limits.audio_seconds:
                raise over(
                    where, "its length in seconds", round(frames / rate, 1),
                    limits.audio_seconds, "audio_seconds",
                )  # fmt: skip
            pcm = w.readframes(frames)
    except (wave.Error, EOFError, struct.error, ValueError, RuntimeError) as exc:  # a bad chunk
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{where}: not a PCM WAV ({exc})") from None
    kinds = {1: (np.uint8, 128, 128), 2: ("<i2", 0, 32768), 4: ("<i4", 0, 2**31)}
    if width not in kinds:
        raise InputError(f"{where}: {width * 8}-bit WAV is not supported (8, 16 or 32-bit PCM)")
    kind, offset, scale = kinds[width]
    pcm = pcm[: len(pcm) - len(pcm) % (width * channels)]  # a cut-off last frame
    x = (np.frombuffer(pcm, kind).astype(np.float32) - offset) / scale
    return x.reshape(-1, channels), rate


IMAGE_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "WEBP")  # Pillow's other decoders stay shut


def decode_image(raw: bytes, where: str, limits: Limits) -> np.ndarray:
    """A PNG, JPEG, GIF, BMP or WebP image (through Pillow) as ``u8[H, W, 3]``; its size (from
    the header, before any pixel is decoded) within ``image_pixels``."""
    check_bytes(len(raw), where, limits)
    try:
        from PIL import Image, UnidentifiedImageError  # pyright: ignore[reportMissingImports]
    except ImportError:
        raise InputError(f"{where}: reading images needs Pillow (`pip install pillow`)") from None
    try:
        with Image.open(io.BytesIO(raw), formats=IMAGE_FORMATS) as im:
            width, height = im.size
            if width * height > limits.image_pixels:
                raise over(
                    where, f"its pixel count ({width} x {height})", width * height,
                    limits.image_pixels, "image_pixels",
                )  # fmt: skip
            return np.asarray(im.convert("RGB")).copy()
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise InputError(f"{where}: a decompression bomb ({exc})") from None
    except UnidentifiedImageError:
        raise InputError(f"{where}: not an image wgc reads ({', '.join(IMAGE_FORMATS)})") from None
    except (
        OSError,
        ValueError,
        SyntaxError,
        EOFError,
        struct.error,
    ) as exc:
        raise InputError(f"{where}: not an image Pillow can read ({exc})") from None


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
TEXT_SUFFIXES = (".txt", ".md")


def read_file(path: Path, where: str, limits: Limits) -> tuple[Any, dict[str, Any]]:
    """(data, fields) of an input file, read by its suffix: ``.npy`` an array, ``.wav``
    f32 samples (``[samples]`` mono, else ``[samples, channels]``) with its ``sample_rate``,
    an image ``u8[H, W, 3]``, ``.txt`` / ``.md`` text."""
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".wav", *IMAGE_SUFFIXES, *TEXT_SUFFIXES):
        raise InputError(f"{where}: cannot read `{suffix}` files (.png, .jpg, .wav, .npy, .txt)")
    if suffix in TEXT_SUFFIXES:  # UTF-8 takes at most 4 bytes a character: refused unread
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
        if size > 4 * limits.text_chars:
            raise InputError(
                f"{where}: its size in bytes is {size:,}, more than 4 bytes for each of the "
                f"{limits.text_chars:,} characters a text may have (`text_chars`)"
            )
    raw = read_bytes(path, where, limits)
    if suffix == ".npy":
        return decode_npy(raw, where, limits), {}
    if suffix == ".wav":
        x, rate = decode_wav(raw, where, limits)
        return (x[:, 0] if x.shape[1] == 1 else x).copy(), {"sample_rate": rate}
    if suffix in IMAGE_SUFFIXES:
        return decode_image(raw, where, limits), {}
    return decode_text(raw, where, limits), {}


# ---------------------------------------------------------------- JSON


def depth_of(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (level by level: any depth)."""
    depth, level = 0, [value]
    while level:
        containers = [v for v in level if type(v) is list or type(v) is dict]
        if not containers:
            break
        depth += 1
        level = []
        for c in containers:
            level.extend(c.values() if type(c) is dict else c)
    return depth


def _check_depth(value: Any, raw: bytes, where: str, limits: Limits) -> None:
    if raw.count(b"[") + raw.count(b"{") <= limits.json_depth:  # it cannot nest deeper
        return
    depth = depth_of(value)
    if depth > limits.json_depth:
        raise over(where, "its nesting depth", depth, limits.json_depth, "json_depth")


def _too_deep(where: str, limits: Limits) -> InputError:
    return InputError(
        f"{where}: its nesting depth is over what the parser takes, and over the limit of "
        f"{limits.json_depth:,} (`json_depth`)"
    )


def parse_json(raw: bytes, where: str, limits: Limits) -> Any:
    """JSON text within ``request_bytes`` (checked before parsing) and ``json_depth`` as
    Python values."""
    check_bytes(len(raw), where, limits, "request_bytes")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(where, limits) from None
    except ValueError as exc:
        raise InputError(f"{where}: not JSON: {exc}") from None
    _check_depth(value, raw, where, limits)
    return value


def check_json(raw: bytes, where: str, limits: Limits) -> None:
    """JSON text within ``request_bytes`` and ``json_depth``, before whatever parses it next
    (text with no more brackets than ``json_depth`` is not parsed here); text that is not JSON
    is left to that parser to say so."""
    check_bytes(len(raw), where, limits, "request_bytes")
    if raw.count(b"[") + raw.count(b"{") <= limits.json_depth:
        return
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(where, limits) from None
    except ValueError:
        return
    _check_depth(value, raw, where, limits)


def loads_within(raw: bytes, where: str, limits: Limits) -> Any:
    """``json.loads(raw)`` within ``json_depth`` (else `InputError`); text that is not JSON
    raises ``json.loads``' own error (a ``ValueError``) for the caller's parser to report."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(where, limits) from None
    _check_depth(value, raw, where, limits)
    return value
