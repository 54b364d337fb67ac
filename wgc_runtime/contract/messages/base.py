"""The base of every message (`Message`: a frozen msgspec Struct, encoded as a msgpack array with
an int tag per class), the two endpoints that are not ranks (`CONDUCTOR`, `CLIENT`) and the
iteration tags data messages carry (`Iters`); see `wgc_runtime.contract.messages`.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

CONDUCTOR = -1
CLIENT = -2

Iters = tuple[tuple[str, int], ...]


class Message(msgspec.Struct, frozen=True, array_like=True):
    """Base of every message (see `wgc_runtime.contract.messages`); ``DATA``: it carries a ``data``
    value that may be a tensor."""

    DATA: ClassVar[bool] = False
