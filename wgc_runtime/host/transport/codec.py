"""The one wire format: typed messages as msgpack, tensors as extension values (never pickle).

A send is a *batch*: a list of messages (`wgc_runtime.contract.messages`, `.control`), encoded by
msgspec as one msgpack array of ``[tag, field, ...]`` arrays, the header frame. Tensors anywhere
in it become msgpack extension values (`wgc_runtime.host.transport.tensors`):

* a *small* tensor (at most `INLINE_MAX_BYTES`) rides inside the header (`EXT_INLINE`);
* a tensor the caller's ``place`` hook puts somewhere else (the shared-memory arena on this host,
  `wgc_runtime.host.transport.arena`) becomes its descriptor (`EXT_SHM`): only that crosses;
* every other tensor gets a frame of its own (`EXT_FRAME`: a zero-copy ``uint8`` view of its
  memory; ZeroMQ sends it with ``copy=False``).

`Codec.decode` reverses it *into the types the socket accepts*: msgspec validates every field
against the message classes (a tag nobody sends here, a field of the wrong type, a truncated or
random frame), and any problem is a `CodecError` naming it, which the receiving loop drops and
logs. Frame tensors are ``torch.frombuffer`` views of the received frames (read-only in spirit),
inline ones own a copy, descriptors go to the caller's ``resolve`` hook. msgpack builds only
plain data and typed Structs: a worker never executes what arrives on a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import msgspec
import numpy as np
import torch

from wgc_runtime.host.transport.tensors import (
    DTYPES,
    EXT_FRAME,
    EXT_INLINE,
    EXT_SHM,
    INLINE_MAX_BYTES,
    CodecError,
    inline_payload,
    inline_tensor,
    tensor_bytes,
    tensor_from,
    tensor_meta,
)

Frame = Any  # bytes, memoryview, numpy array or zmq.Frame: anything with the buffer protocol
Place = Callable[[torch.Tensor], Any]  # tensor -> descriptor (msgpack-able) or None (inline)
Resolve = Callable[[Any], torch.Tensor]  # descriptor -> tensor

__all__ = [
    "DTYPES",
    "INLINE_MAX_BYTES",
    "Codec",
    "CodecError",
    "decode",
    "encode",
]

_FRAME_REF = msgspec.msgpack.Decoder(tuple[int, str, list[int]])
_DESCRIPTOR = msgspec.msgpack.Decoder(tuple[int, int, int, str, list[int], int])


class Codec:
    """Encodes and decodes the frames of one socket's traffic.

    ``accepts``: the message classes a decode may produce (decoded as ``list[Union[...]]``, a
    batch); None decodes any plain msgpack structure (tests, tools). Holds a reusable encoder
    and decoder, so it is not thread-safe: one per thread that sends or receives (a `Mesh` has
    its own).
    """

    def __init__(self, accepts: Sequence[type] | None = None) -> None:
        self._frames: list[Frame] = []
        self._place: Place | None = None
        self._rx: Sequence[Frame] = ()
        self._resolve: Resolve | None = None
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        kind: Any = Any if not accepts else list[Union[tuple(accepts)]]  # noqa: UP007
        self._decoder = msgspec.msgpack.Decoder(kind, ext_hook=self._ext_hook)

    # ---------------------------------------------------------------- encoding
    def encode(self, msg: Any, place: Place | None = None) -> list[Frame]:
        """``[header, *tensor frames]`` for ``msg`` (a batch of messages, or plain data)."""
        frames: list[Frame] = [b""]
        self._frames, self._place = frames, place
        try:
            frames[0] = self._encoder.encode(msg)
        except CodecError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise CodecError(f"cannot encode message: {exc}") from exc
        finally:
            self._frames, self._place = [], None  # keep no tensor alive
        return frames

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            obj = torch.from_numpy(np.ascontiguousarray(obj))
        if isinstance(obj, torch.Tensor):
            return self._tensor_ext(obj)
        if isinstance(obj, set | frozenset):
            return sorted(obj)
        raise CodecError(f"cannot encode {type(obj).__name__} (only plain data and tensors)")

    def _tensor_ext(self, t: torch.Tensor) -> msgspec.msgpack.Ext:
        if self._place is not None:
            desc = self._place(t)
            if desc is not None:
                return msgspec.msgpack.Ext(EXT_SHM, msgspec.msgpack.encode(desc))
        small = inline_payload(t)
        if small is not None:
            return msgspec.msgpack.Ext(EXT_INLINE, small)
        dtype, shape = tensor_meta(t)
        self._frames.append(tensor_bytes(t))
        ref = [len(self._frames) - 1, dtype, shape]
        return msgspec.msgpack.Ext(EXT_FRAME, msgspec.msgpack.encode(ref))

    # ---------------------------------------------------------------- decoding
    def decode(self, frames: Sequence[Frame], resolve: Resolve | None = None) -> Any:
        """What `encode` made ``frames`` from, validated against ``accepts``."""
        if not frames:
            raise CodecError("empty message")
        self._rx, self._resolve = frames, resolve
        try:
            return self._decoder.decode(_buffer(frames[0]))
        except CodecError:
            raise
        except msgspec.ValidationError as exc:
            raise CodecError(f"invalid message: {exc}") from None
        except (msgspec.DecodeError, ValueError, TypeError, OverflowError) as exc:
            raise CodecError(f"cannot decode message: {exc}") from None
        finally:
            self._rx, self._resolve = (), None

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code == EXT_INLINE:
            return inline_tensor(data)
        try:
            if code == EXT_FRAME:
                index, dtype, shape = _FRAME_REF.decode(data)
                if not 0 < index < len(self._rx):
                    raise CodecError(f"tensor frame {index} missing (message has {len(self._rx)})")
                return tensor_from(_buffer(self._rx[index]), dtype, shape)
            if code == EXT_SHM:
                if self._resolve is None:
                    raise CodecError("an arena descriptor arrived where no arena is attached")
                return self._resolve(list(_DESCRIPTOR.decode(data)))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CodecError(f"malformed tensor reference: {exc}") from None
        raise CodecError(f"unknown msgpack extension {code}")


def _buffer(frame: Frame) -> Any:
    """The buffer of a received frame (a ``zmq.Frame`` exposes ``.buffer``)."""
    return getattr(frame, "buffer", frame)


def encode(msg: Any, place: Place | None = None) -> list[Frame]:
    """``[header, *tensor frames]`` for ``msg`` (see the module docstring)."""
    return Codec().encode(msg, place)


def decode(frames: Sequence[Frame], resolve: Resolve | None = None) -> Any:
    """The plain structure ``encode`` made ``frames`` from (untyped: tests and tools)."""
    return Codec().decode(frames, resolve)
