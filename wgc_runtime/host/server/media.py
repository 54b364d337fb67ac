"""Tensors in and out of HTTP: WAV/PCM audio, PNG images, text, JSON tensors, data URLs.

Out: audio is 16-bit PCM (float samples in [-1, 1], or integer PCM), streamed as a WAV whose
header gives the sizes as unknown (``0xFFFFFFFF``, as streaming WAV writers do) or as raw PCM;
images (``[H, W]``, ``[H, W, C]`` or ``[C, H, W]``; u8, or floats in [0, 1] or [-1, 1]) are PNG;
text outputs are token ids of the stand-in byte tokenizer, decoded as UTF-8 incrementally (a
character split over two tokens comes out whole); any tensor is JSON as dtype, shape, base64 of
its little-endian bytes, and its values when it is small.

In: ``data:`` URLs and uploads (PNG/JPEG via Pillow, WAV via the standard library) and JSON
tensors (nested lists, optionally with a ``dtype``, or ``{"dtype", "shape", "b64"}``), decoded
and bounded by the deployment's limits through `wgc_runtime.host.inputs` (the readers `wgc run`
uses too); what cannot be read, or is over a limit, raises `MediaError` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import struct
from typing import Any

import numpy as np
import torch

from wgc_runtime.contract.node import DTYPE_NAMES, DTYPES
from wgc_runtime.host import inputs
from wgc_runtime.host.inputs import InputError, Limits

SMALL = 1024  # a JSON tensor carries its values as lists up to this many elements
UNKNOWN = 0xFFFFFFFF


MediaError = InputError  # input that cannot be decoded; the message is ``where: why``


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


def tensor_from_json(value: Any, dtype: str | None, where: str, limits: Limits) -> Any:
    """A segment's data or field from JSON: strings and scalars as they are (the walk input's
    type is checked at the door), lists as tensors (of ``dtype`` when given), ``{"dtype",
    "shape", "b64"}`` as the tensor it encodes, a ``data:`` URL as the image or audio in it."""
    if isinstance(value, dict):
        out = _encoded_tensor(value, where, limits)
    elif isinstance(value, str) and value.startswith("data:"):
        out = decode_data_url(value, where, limits)[0]
    elif isinstance(value, list):
        out = _as_tensor(value, None if dtype is None else _dtype(dtype, where), where)
    elif dtype is not None and isinstance(value, int | float | bool):
        out = _as_tensor(value, _dtype(dtype, where), where)
    else:
        out = value
    inputs.check_value(out, where, limits)
    return out


def _encoded_tensor(obj: dict[str, Any], where: str, limits: Limits) -> torch.Tensor:
    dtype = _dtype(str(obj.get("dtype", "")), where)
    if "b64" not in obj:
        if "data" in obj:
            return _as_tensor(obj["data"], dtype, where)
        raise MediaError(f"{where}: an encoded tensor needs `dtype` and `b64` (or `data`)")
    raw = _b64(obj["b64"], where, "`b64`", limits)
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


def _b64(text: Any, where: str, what: str, limits: Limits) -> bytes:
    """Base64 text (``what`` of ``where``) as bytes, within ``file_bytes`` (checked before
    decoding)."""
    if not isinstance(text, str | bytes):
        raise MediaError(f"{where}: {what} is not base64 text")
    inputs.check_bytes(len(text) * 3 // 4, where, limits)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise MediaError(f"{where}: {what} is not base64") from None


def decode_data_url(url: str, where: str, limits: Limits) -> tuple[Any, dict[str, Any]]:
    """``data:<mime>;base64,<payload>`` as (tensor, fields): an image as ``u8[H, W, 3]``, a
    WAV as ``f32[samples]`` with its ``sample_rate``."""
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise MediaError(f"{where}: expected a `data:<type>;base64,...` URL")
    raw = _b64(payload, where, "the data URL's payload", limits)
    mime = head[5:-7]
    if mime.startswith("audio/"):
        return decode_wav(raw, where, limits)
    if mime.startswith("image/"):
        return decode_image(raw, where, limits), {}
    raise MediaError(f"{where}: cannot read `{mime}` (images or audio/wav)")


def decode_b64_wav(text: Any, where: str, limits: Limits) -> tuple[torch.Tensor, dict[str, Any]]:
    """Base64 text of a WAV (an OpenAI ``input_audio``), as `decode_wav`."""
    return decode_wav(_b64(text, where, "`data`", limits), where, limits)


def decode_image(raw: bytes, where: str, limits: Limits) -> torch.Tensor:
    """PNG, JPEG ... (through Pillow) as ``u8[H, W, 3]`` (`inputs.decode_image`)."""
    return torch.from_numpy(inputs.decode_image(raw, where, limits))


def decode_wav(raw: bytes, where: str, limits: Limits) -> tuple[torch.Tensor, dict[str, Any]]:
    """A PCM WAV as mono ``f32[samples]`` in [-1, 1], with ``{"sample_rate": rate}``
    (`inputs.decode_wav`, its channels averaged)."""
    x, rate = inputs.decode_wav(raw, where, limits)
    return torch.from_numpy(x.mean(axis=1)), {"sample_rate": rate}
