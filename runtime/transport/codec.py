"""Wire encoding of runtime messages: msgpack headers, tensors as zero-copy frames (never pickle).

A message is a msgpack-able structure (dicts, lists, str, int, float, bool, None, bytes) that may
hold ``torch.Tensor`` values anywhere. `encode` turns it into a list of ZeroMQ frames:

* frame 0 is the msgpack header: the structure, with every tensor replaced by a msgpack
  extension value that says where its bytes are;
* every tensor sent *inline* gets its own frame: a ``uint8`` view of the contiguous CPU tensor's
  memory (``tensor.reshape(-1).view(torch.uint8).numpy()``: no copy; ZeroMQ sends it with
  ``copy=False`` and holds a reference until it is on the wire). Every dtype travels this way,
  ``bf16`` and ``bool`` included (numpy has no bfloat16: the byte view sidesteps it); dtype and
  shape are in the extension value.
* a tensor the caller's ``place`` hook puts somewhere else (the shared-memory arena, see
  `wgc_runtime.transport.arena`) becomes a *descriptor* extension value: only the descriptor
  crosses the socket.

`decode` reverses it: inline tensors are ``torch.frombuffer`` views of the received frames (no
copy; they are read-only in spirit: a node must not write its inputs), descriptors go to the
caller's ``resolve`` hook. A worker never executes what arrives on a socket: msgpack builds only
plain data, and an unknown extension code or dtype is a `CodecError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import torch

EXT_FRAME = 1  # a tensor whose bytes are frame ``index`` of the message
EXT_SHM = 2  # a tensor in a shared-memory arena: the payload is the arena's descriptor

# dtype names on the wire (the runtime's names where it has one)
DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "u8": torch.uint8,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
    "c64": torch.complex64,
}
NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}

Frame = Any  # bytes, memoryview, numpy array or zmq.Frame: anything with the buffer protocol
Place = Callable[[torch.Tensor], Any]  # tensor -> descriptor (msgpack-able) or None (inline)
Resolve = Callable[[Any], torch.Tensor]  # descriptor -> tensor


class CodecError(ValueError):
    """A message that cannot be encoded or decoded (unknown type, dtype or extension)."""


def tensor_bytes(t: torch.Tensor) -> Any:
    """A zero-copy ``uint8`` numpy view of ``t``'s memory (copies only when ``t`` is not a
    contiguous CPU tensor). The array keeps the tensor alive."""
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.detach().reshape(-1).view(torch.uint8).numpy()


def tensor_from(buf: Any, dtype: str, shape: Sequence[int]) -> torch.Tensor:
    """A tensor viewing ``buf`` (no copy) with ``dtype`` (a wire name) and ``shape``."""
    try:
        torch_dtype = DTYPES[dtype]
    except KeyError:
        raise CodecError(f"unknown dtype `{dtype}` on the wire") from None
    shape = tuple(int(d) for d in shape)
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return torch.empty(shape, dtype=torch_dtype)
    with warnings.catch_warnings():
        # received frames are read-only buffers; the tensor is an input nobody writes
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(buf, dtype=torch_dtype, count=n)
    return flat.reshape(shape)


def tensor_meta(t: torch.Tensor) -> tuple[str, list[int]]:
    try:
        return NAMES[t.dtype], list(t.shape)
    except KeyError:
        raise CodecError(f"cannot send a tensor of dtype {t.dtype}") from None


def encode(msg: Any, place: Place | None = None) -> list[Frame]:
    """``[header, *tensor frames]`` for ``msg`` (see the module docstring)."""
    frames: list[Frame] = [b""]

    def default(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            dtype, shape = tensor_meta(obj)
            if place is not None:
                desc = place(obj)
                if desc is not None:
                    return msgpack.ExtType(EXT_SHM, _pack(desc))
            frames.append(tensor_bytes(obj))
            return msgpack.ExtType(EXT_FRAME, _pack([len(frames) - 1, dtype, shape]))
        if isinstance(obj, (tuple, set, frozenset)):
            return list(obj)
        raise CodecError(f"cannot encode {type(obj).__name__} (only plain data and tensors)")

    try:
        frames[0] = msgpack.packb(msg, default=default, use_bin_type=True)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"cannot encode message: {exc}") from exc
    return frames


def decode(frames: Sequence[Frame], resolve: Resolve | None = None) -> Any:
    """The message ``encode`` made ``frames`` from; tensors view the frames' memory."""
    if not frames:
        raise CodecError("empty message")

    def ext_hook(code: int, data: bytes) -> Any:
        if code == EXT_FRAME:
            index, dtype, shape = _unpack(data)
            if not 0 < index < len(frames):
                raise CodecError(f"tensor frame {index} missing (message has {len(frames)})")
            return tensor_from(_buffer(frames[index]), dtype, shape)
        if code == EXT_SHM:
            if resolve is None:
                raise CodecError("an arena descriptor arrived where no arena is attached")
            return resolve(_unpack(data))
        raise CodecError(f"unknown msgpack extension {code}")

    try:
        return msgpack.unpackb(
            _buffer(frames[0]), ext_hook=ext_hook, raw=False, strict_map_key=False
        )
    except CodecError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CodecError(f"cannot decode message: {exc}") from exc


def _buffer(frame: Frame) -> Any:
    """The buffer of a received frame (a ``zmq.Frame`` exposes ``.buffer``)."""
    return getattr(frame, "buffer", frame)


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
