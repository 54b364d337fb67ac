"""The launcher's codec: the launcher protocol's messages, with no tensors and no torch.

The launcher only speaks the launcher protocol (`wgc_runtime.contract.control`: `Hello`,
`Peers`, `Progress`, `Ready`, `StartFailed`, `Shutdown`, `RankDied`, `GetUsage`, `Usage`), none
of which carries a tensor, so it needs neither the tensor extensions of the full wire format
(`wgc_runtime.host.transport.codec`) nor torch: starting a deployment does not pay for
importing torch in the launcher. The bytes are the full codec's (one msgpack array of typed
messages in one frame), so either side may use either codec. A message that holds anything but
plain data (a tensor extension, say) does not decode here: it is dropped like any bad frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import msgspec


class ControlCodecError(ValueError):
    """A frame that is not a batch of the messages this codec accepts."""


class ControlCodec:
    """Encodes and decodes batches of tensor-free messages (``accepts``: the classes a decode
    may produce). Not thread-safe: one per thread, like `codec.Codec`."""

    def __init__(self, accepts: Sequence[type]) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        kind: Any = list[Union[tuple(accepts)]]  # noqa: UP007
        self._decoder = msgspec.msgpack.Decoder(kind)

    def encode(self, msg: Any, place: Any = None) -> list[Any]:
        """``[header]``; ``place`` is accepted for the mesh's sake (nothing here is a tensor)."""
        try:
            return [self._encoder.encode(msg)]
        except (TypeError, ValueError, OverflowError) as exc:
            raise ControlCodecError(f"cannot encode message: {exc}") from exc

    def decode(self, frames: Sequence[Any], resolve: Any = None) -> Any:
        if len(frames) != 1:
            raise ControlCodecError(f"a control message is one frame, got {len(frames)}")
        frame = frames[0]
        try:
            return self._decoder.decode(getattr(frame, "buffer", frame))
        except msgspec.ValidationError as exc:
            raise ControlCodecError(f"invalid message: {exc}") from None
        except (msgspec.DecodeError, ValueError, TypeError, OverflowError) as exc:
            raise ControlCodecError(f"cannot decode message: {exc}") from None
