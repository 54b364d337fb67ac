"""Where a core's parts send their messages (`Post`): one object the executor's (or the
conductor's) parts share, holding the host's outbox.

The host gives a core ``outbox(to, msg)``; every part of the core sends through the same
`Post`, so replacing its ``send`` (a test recording the traffic, a batch holding its messages
to pack them) reaches every part at once.
"""

from __future__ import annotations

from collections.abc import Callable

from wgc_runtime.contract.messages import Message

Outbox = Callable[[int, Message], None]


class Post:
    """Holds ``send(to, msg)``, the outbox every part of one core sends through."""

    __slots__ = ("send",)

    def __init__(self, send: Outbox) -> None:
        self.send = send
