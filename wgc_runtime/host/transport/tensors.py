"""Tensors as bytes: the zero-copy views and the small inline form the codec puts on the wire.

* `tensor_bytes` is a ``uint8`` numpy view of a contiguous CPU tensor's memory (no copy; ZeroMQ
  sends it with ``copy=False``), `tensor_from` the tensor viewing a received buffer. Every dtype
  travels this way, ``bf16`` and ``bool`` included (numpy has no bfloat16: the byte view
  sidesteps it).
* `inline_payload` / `inline_tensor`: a small tensor (at most `INLINE_MAX_BYTES`) as one bytes
  value, dtype index, ndim, dims and its bytes, so it rides inside the message header.

Nothing here trusts its input: an unknown dtype, a short buffer or a malformed payload is a
`CodecError`.
"""

from __future__ import annotations

import ctypes
import struct
import warnings
from collections.abc import Sequence
from typing import Any

import torch


class CodecError(ValueError):
    """A message that cannot be encoded or decoded (unknown type, dtype, extension or field)."""


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
    except (KeyError, TypeError):
        raise CodecError(f"unknown dtype `{dtype}` on the wire") from None
    shape = _shape(shape)
    n = _numel(shape)
    if n == 0:
        return torch.empty(shape, dtype=torch_dtype)
    if memoryview(buf).nbytes != n * torch_dtype.itemsize:
        raise CodecError(
            f"a tensor frame of {memoryview(buf).nbytes} bytes for {dtype}{list(shape)}"
        )
    with warnings.catch_warnings():
        # received frames are read-only buffers; the tensor is an input nobody writes
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.frombuffer(buf, dtype=torch_dtype, count=n)
    return flat.reshape(shape)


def _shape(dims: Any) -> tuple[int, ...]:
    if not isinstance(dims, list | tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 48 for d in dims
    ):
        raise CodecError(f"a malformed tensor shape {dims!r}")
    return tuple(dims)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    if n >= 1 << 48:
        raise CodecError(f"a tensor shape too large to be real: {list(shape)}")
    return n


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


def inline_tensor(data: bytes | memoryview) -> torch.Tensor:
    """The tensor an `EXT_INLINE` payload describes (it owns a copy of the bytes)."""
    try:
        index, ndim = _HEAD.unpack_from(data)
        dtype = _BY_INDEX[index]
        shape = _HEADS[ndim].unpack_from(data)[2:]
    except (struct.error, IndexError):
        raise CodecError("malformed inline tensor") from None
    n = _numel(_shape(shape))
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
