"""Tensors in and out of HTTP: WAV/PCM audio, PNG images, text, JSON tensors, data URLs.

Out: audio is 16-bit PCM (float samples in [-1, 1], or integer PCM), streamed as a WAV whose
header gives the sizes as unknown (``0xFFFFFFFF``, as streaming WAV writers do) or as raw PCM;
images (``[H, W]``, ``[H, W, C]`` or ``[C, H, W]``; u8, or floats in [0, 1] or [-1, 1]) are PNG;
text outputs are token ids of the stand-in byte tokenizer, decoded as UTF-8 incrementally (a
character split over two tokens comes out whole); any tensor is JSON as dtype, shape, base64 of
its little-endian bytes, and its values when it is small.

In: ``data:`` URLs and uploads (PNG/JPEG via Pillow, WAV via the standard library) and JSON
tensors (nested lists, optionally with a ``dtype``, or ``{"dtype", "shape", "b64"}``).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import struct
import wave
from typing import Any

import numpy as np
import torch

from wgc_runtime.contract.node import DTYPE_NAMES, DTYPES

SMALL = 1024  # a JSON tensor carries its values as lists up to this many elements
UNKNOWN = 0xFFFFFFFF


class MediaError(ValueError):
    """Input that cannot be decoded; the message says what was expected."""


# ---------------------------------------------------------------- audio out


def pcm16(samples: Any) -> bytes:
    """Float samples in [-1, 1] (or integer PCM) as 16-bit little-endian mono frames."""
    x = samples.detach().cpu().float().numpy() if isinstance(samples, torch.Tensor) else samples
    x = np.asarray(x).reshape(-1)
    if x.dtype.kind == "f":
        x = np.clip(x, -1.0, 1.0) * 32767
    return np.round(x).astype("<i2").tobytes()


def wav_header(rate: int, data_bytes: int | None = None, channels: int = 1) -> bytes:
    """A 44-byte PCM16 WAV header; ``data_bytes`` None: sizes unknown (a streamed WAV)."""
    data = UNKNOWN if data_bytes is None else data_bytes
    riff = UNKNOWN if data_bytes is None else 36 + data_bytes
    block = 2 * channels
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * block, block, 16)
        + b"data"
        + struct.pack("<I", data)
    )


def wav_bytes(pcm: bytes, rate: int) -> bytes:
    return wav_header(rate, len(pcm)) + pcm


# ---------------------------------------------------------------- images out


def png_bytes(image: Any) -> bytes:
    """``image`` as PNG (through Pillow)."""
    from PIL import Image

    x = image.detach().cpu() if isinstance(image, torch.Tensor) else torch.as_tensor(image)
    if x.dim() == 3 and x.shape[0] in (1, 3, 4) and x.shape[-1] not in (1, 3, 4):
        x = x.permute(1, 2, 0)
    if x.dim() == 3 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.dtype != torch.uint8:
        x = x.float()
        if x.numel() and x.min() < 0:
            x = (x + 1) / 2
        x = (x.clamp(0, 1) * 255 + 0.5).to(torch.uint8)
    if x.dim() not in (2, 3):
        raise MediaError(f"cannot write an image of shape {tuple(x.shape)}")
    out = io.BytesIO()
    Image.fromarray(x.contiguous().numpy()).save(out, format="PNG")
    return out.getvalue()


# ---------------------------------------------------------------- text out


class TextDecoder:
    """Token ids (one output at a time) to text: byte-range ids through an incremental UTF-8
    decoder, other ids as numbers; a str output as it is."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        ids = torch.as_tensor(value).reshape(-1).tolist()
        if all(isinstance(i, int) and 0 <= i < 256 for i in ids):
            return self._utf8.decode(bytes(ids))
        return " ".join(str(i) for i in ids) + " "

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


# ---------------------------------------------------------------- tensors as JSON


def tensor_json(value: Any) -> Any:
    """An output value as JSON (see the module docstring); None stays None."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        return value
    t = value.detach().cpu().contiguous()
    raw = t.view(torch.uint8) if t.dtype == torch.bfloat16 else t
    out: dict[str, Any] = {
        "dtype": DTYPE_NAMES.get(t.dtype, str(t.dtype)),
        "shape": list(t.shape),
        "b64": base64.b64encode(raw.numpy().tobytes()).decode("ascii"),
    }
    if t.numel() <= SMALL:
        out["data"] = (t.float() if t.dtype == torch.bfloat16 else t).tolist()
    return out


def tensor_from_json(value: Any, dtype: str | None = None, where: str = "data") -> Any:
    """A segment's data or field from JSON: strings and scalars as they are (the walk input's
    type is checked at the door), lists as tensors (of ``dtype`` when given), ``{"dtype",
    "shape", "b64"}`` as the tensor it encodes, a ``data:`` URL as the image or audio in it."""
    if isinstance(value, dict):
        return _encoded_tensor(value, where)
    if isinstance(value, str) and value.startswith("data:"):
        return decode_data_url(value, where)[0]
    if isinstance(value, list):
        return _as_tensor(value, None if dtype is None else _dtype(dtype, where), where)
    if dtype is not None and isinstance(value, int | float | bool):
        return _as_tensor(value, _dtype(dtype, where), where)
    return value


def _encoded_tensor(obj: dict[str, Any], where: str) -> torch.Tensor:
    dtype = _dtype(str(obj.get("dtype", "")), where)
    if "b64" not in obj:
        if "data" in obj:
            return _as_tensor(obj["data"], dtype, where)
        raise MediaError(f"{where}: an encoded tensor needs `dtype` and `b64` (or `data`)")
    try:
        raw = base64.b64decode(obj["b64"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise MediaError(f"{where}: `b64` is not base64") from None
    shape = obj.get("shape")
    if shape is None:
        shape = [-1]  # one dimension, as long as the bytes make it
    elif not (
        isinstance(shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise MediaError(f"{where}: `shape` is a list of sizes (integers >= 0), got `{shape!r}`")
    np_dtype = {torch.bfloat16: np.uint16}.get(dtype) or torch.empty(0, dtype=dtype).numpy().dtype
    try:
        arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape).copy()
    except ValueError as exc:
        raise MediaError(f"{where}: {exc}") from None
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def _as_tensor(value: Any, dtype: torch.dtype | None, where: str) -> torch.Tensor:
    """Nested lists (or a number) as a tensor, of ``dtype`` when given."""
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise MediaError(f"{where}: not a tensor ({exc})") from None
    if dtype is None or t.dtype == dtype:
        return t
    out = t.to(dtype)
    if dtype.is_floating_point or t.dtype == torch.bool:
        return out  # rounding to a float type is what a float input means; bools are exact
    back = out.to(torch.float64) if t.dtype.is_floating_point else out.to(t.dtype)
    if not torch.equal(back, t.to(back.dtype)):  # 1.5 as an int, 300 as a u8, 2 as a bool
        bad = (back != t.to(back.dtype)).nonzero()[0].tolist()
        at = "".join(f"[{i}]" for i in bad)
        raise MediaError(
            f"{where}{at}: `{t[tuple(bad)].item()!r}` does not fit dtype {DTYPE_NAMES[dtype]}"
        )
    return out


def _dtype(name: str, where: str) -> torch.dtype:
    if name not in DTYPES:
        raise MediaError(f"{where}: unknown dtype `{name}` (one of {', '.join(DTYPES)})")
    return DTYPES[name]


# ---------------------------------------------------------------- images and audio in


def decode_data_url(url: str, where: str = "url") -> tuple[Any, dict[str, Any]]:
    """``data:<mime>;base64,<payload>`` as (tensor, fields): an image as ``u8[H, W, 3]``, a
    WAV as ``f32[samples]`` with its ``sample_rate``."""
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise MediaError(f"{where}: expected a `data:<type>;base64,...` URL")
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error:
        raise MediaError(f"{where}: the data URL's payload is not base64") from None
    mime = head[5:-7]
    if mime.startswith("audio/"):
        return decode_wav(raw, where)
    if mime.startswith("image/"):
        return decode_image(raw, where), {}
    raise MediaError(f"{where}: cannot read `{mime}` (images or audio/wav)")


def decode_image(raw: bytes, where: str = "image") -> torch.Tensor:
    """PNG, JPEG ... (through Pillow) as ``u8[H, W, 3]``."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as im:
            return torch.from_numpy(np.asarray(im.convert("RGB")).copy())
    except (UnidentifiedImageError, OSError) as exc:
        raise MediaError(f"{where}: not an image Pillow can read ({exc})") from None


def decode_wav(raw: bytes, where: str = "audio") -> tuple[torch.Tensor, dict[str, Any]]:
    """A PCM WAV as mono ``f32[samples]`` in [-1, 1], with ``{"sample_rate": rate}``."""
    try:
        with wave.open(io.BytesIO(raw), "rb") as w:
            width, channels, rate = w.getsampwidth(), w.getnchannels(), w.getframerate()
            frames = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise MediaError(f"{where}: not a PCM WAV ({exc})") from None
    kinds = {1: (np.uint8, 128, 128), 2: ("<i2", 0, 32768), 4: ("<i4", 0, 2**31)}
    if width not in kinds:
        raise MediaError(f"{where}: {width * 8}-bit WAV is not supported (8, 16 or 32-bit PCM)")
    kind, offset, scale = kinds[width]
    x = (np.frombuffer(frames, kind).astype(np.float32) - offset) / scale
    x = x.reshape(-1, channels).mean(axis=1)
    return torch.from_numpy(x.copy()), {"sample_rate": rate}
