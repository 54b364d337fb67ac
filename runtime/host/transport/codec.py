"""Wire encoding of runtime messages: msgpack headers, tensors as zero-copy frames (never pickle).

A message is a msgpack-able structure (dicts, lists, str, int, float, bool, None, bytes) that may
hold ``torch.Tensor`` values anywhere. `encode` turns it into a list of ZeroMQ frames:

* frame 0 is the msgpack header: the structure, with every tensor replaced by a msgpack
  extension value that says where its bytes are;
* a *small* tensor (at most `INLINE_MAX_BYTES`) rides inside the header as an `EXT_INLINE`
  extension value: dtype, shape and its bytes (one copy of a few bytes is cheaper than a frame
  of its own: every extra ZeroMQ frame costs a zmq message, a ``zmq.Frame`` on receipt and a
  read-only-buffer warning dance in ``torch.frombuffer``);
* every other tensor sent *inline* gets its own frame: a ``uint8`` view of the contiguous CPU
  tensor's memory (``tensor.reshape(-1).view(torch.uint8).numpy()``: no copy; ZeroMQ sends it with
  ``copy=False`` and holds a reference until it is on the wire). Every dtype travels this way,
  ``bf16`` and ``bool`` included (numpy has no bfloat16: the byte view sidesteps it); dtype and
  shape are in the extension value.
* a tensor the caller's ``place`` hook puts somewhere else (the shared-memory arena, see
  `wgc_runtime.host.transport.arena`) becomes a *descriptor* extension value: only the descriptor
  crosses the socket.

`decode` reverses it: frame tensors are ``torch.frombuffer`` views of the received frames (no
copy; they are read-only in spirit: a node must not write its inputs), small inline tensors own
a copy of their few bytes, descriptors go to the
caller's ``resolve`` hook. A worker never executes what arrives on a socket: msgpack builds only
plain data, and an unknown extension code or dtype is a `CodecError`.
"""

from __future__ import annotations

import ctypes
import struct
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import torch

EXT_FRAME = 1  # a tensor whose bytes are frame ``index`` of the message
EXT_SHM = 2  # a tensor in a shared-memory arena: the payload is the arena's descriptor
EXT_INLINE = 3  # a small tensor: dtype index, ndim, dims (int64) and its bytes, in the payload
INLINE_MAX_BYTES = 8 << 10  # tensors up to this size travel inside the header

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
_BY_INDEX: list[torch.dtype] = list(DTYPES.values())  # EXT_INLINE's dtype byte
_INDEX: dict[torch.dtype, int] = {d: i for i, d in enumerate(_BY_INDEX)}
_HEAD = struct.Struct("<BB")  # EXT_INLINE: dtype index, ndim, then ndim int64 dims, then bytes
_HEADS = [struct.Struct(f"<BB{n}q") for n in range(33)]

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


def inline_payload(t: torch.Tensor) -> bytes | None:
    """`EXT_INLINE`'s payload for ``t``, or None when ``t`` is too large (or on another device,
    or of an unknown dtype) and takes the general path."""
    nbytes = t.nbytes
    if nbytes > INLINE_MAX_BYTES or not t.is_cpu:
        return None
    index = _INDEX.get(t.dtype)
    shape = t.shape
    if index is None or len(shape) >= len(_HEADS):
        return None
    if not t.is_contiguous():
        t = t.contiguous()
    head = _HEADS[len(shape)].pack(index, len(shape), *shape)
    # one read of the tensor's memory (data_ptr includes the storage offset)
    return head + ctypes.string_at(t.data_ptr(), nbytes) if nbytes else head


def inline_tensor(data: bytes) -> torch.Tensor:
    """The tensor an `EXT_INLINE` payload describes (it owns a copy of the bytes)."""
    try:
        index, ndim = _HEAD.unpack_from(data)
        dtype = _BY_INDEX[index]
        shape = _HEADS[ndim].unpack_from(data)[2:]
    except (struct.error, IndexError):
        raise CodecError("malformed inline tensor") from None
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    # a writable copy of the few bytes: the tensor owns its memory (no read-only buffer)
    body = bytearray(memoryview(data)[_HEADS[ndim].size :])
    if len(body) != n * dtype.itemsize:
        raise CodecError("inline tensor of the wrong size")
    flat = torch.frombuffer(body, dtype=dtype, count=n)
    return flat if ndim == 1 else flat.reshape(shape)


def tensor_meta(t: torch.Tensor) -> tuple[str, list[int]]:
    try:
        return NAMES[t.dtype], list(t.shape)
    except KeyError:
        raise CodecError(f"cannot send a tensor of dtype {t.dtype}") from None


def _tensor_ext(obj: torch.Tensor, frames: list[Frame], place: Place | None) -> msgpack.ExtType:
    """The extension value for a tensor: a descriptor (``place``), inline bytes, or a frame."""
    if place is not None:
        desc = place(obj)
        if desc is not None:
            return msgpack.ExtType(EXT_SHM, _pack(desc))
    small = inline_payload(obj)
    if small is not None:
        return msgpack.ExtType(EXT_INLINE, small)
    dtype, shape = tensor_meta(obj)
    frames.append(tensor_bytes(obj))
    return msgpack.ExtType(EXT_FRAME, _pack([len(frames) - 1, dtype, shape]))


def _unknown(obj: Any) -> Any:
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise CodecError(f"cannot encode {type(obj).__name__} (only plain data and tensors)")


class Encoder:
    """`encode` with a reusable msgpack packer: a process's hot send path keeps one (building a
    packer per message costs more than packing a small message). Not thread-safe: one per
    sending thread (a `Mesh` has its own)."""

    def __init__(self) -> None:
        self._frames: list[Frame] = []
        self._place: Place | None = None
        self._packer = msgpack.Packer(default=self._default, use_bin_type=True, autoreset=True)

    def _default(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return _tensor_ext(obj, self._frames, self._place)
        return _unknown(obj)

    def encode(self, msg: Any, place: Place | None = None) -> list[Frame]:
        """``[header, *tensor frames]`` for ``msg`` (see the module docstring)."""
        frames: list[Frame] = [b""]
        self._frames, self._place = frames, place
        try:
            frames[0] = self._packer.pack(msg)
        except (TypeError, ValueError) as exc:
            self._packer.reset()  # drop a half-packed message
            if isinstance(exc, CodecError):
                raise
            raise CodecError(f"cannot encode message: {exc}") from exc
        finally:
            self._frames, self._place = [], None  # keep no tensor alive
        return frames


def encode(msg: Any, place: Place | None = None) -> list[Frame]:
    """``[header, *tensor frames]`` for ``msg`` (see the module docstring)."""
    return Encoder().encode(msg, place)


def decode(frames: Sequence[Frame], resolve: Resolve | None = None) -> Any:
    """The message ``encode`` made ``frames`` from; tensors view the frames' memory."""
    if not frames:
        raise CodecError("empty message")

    def ext_hook(code: int, data: bytes) -> Any:
        if code == EXT_INLINE:
            return inline_tensor(data)
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
