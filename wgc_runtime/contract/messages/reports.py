"""What the ranks report to the conductor (`WalkDone`, `StateImported`, `ChunkReady`, `ChunksDone`,
`ClientOut`, `Failed`) and what the client sees of a request (`Output`, `Finished`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from wgc_runtime.contract.kinds import Cause, FailKind
from wgc_runtime.contract.messages.base import Message

# ---------------------------------------------------------------- rank -> conductor


class WalkDone(Message, frozen=True, tag=14):
    """``rank`` finished its piece of walk instance ``walk_id``; ``emits``: the outputs that
    piece sent its client directly (`Output`, a request with a `route`), all sent before this."""

    request: str
    walk_id: int
    walk: str
    rank: int
    emits: int = 0


class StateImported(Message, frozen=True, tag=15):
    """``rank`` imported the state of ``node`` moved for walk instance ``walk_id``."""

    request: str
    walk_id: int
    node: str
    rank: int


class ChunkReady(Message, frozen=True, tag=16):
    """Chunk ``index`` of ``stream`` can be taken; ``empty``: it holds no item; ``final``: it is
    the stream's final chunk (known exactly when it becomes ready)."""

    request: str
    stream: str
    index: int
    empty: bool
    final: bool


class ChunksDone(Message, frozen=True, tag=25):
    """The owner ran its standing rule (`StreamSpec.chunk_walk`) through the final chunk of
    ``stream``: ``walks`` chunk walks ran, ``skipped`` empty chunks were dropped; the stream's
    ``on`` flow is done for the request. Sent after every emit of those walks (one channel to
    the conductor: they arrive first)."""

    request: str
    stream: str
    walks: int
    skipped: int
    emits: int = 0  # outputs those walks sent the client directly (`route`)


class ClientOut(Message, frozen=True, tag=17):
    """An emitted value (``iters``: the emit's loop iterations, outermost first)."""

    DATA: ClassVar[bool] = True
    request: str
    walk_id: int
    walk: str
    flow: str
    modality: str
    channel: str
    iters: tuple[int, ...] = ()
    data: Any = None


class Emitted(Message, frozen=True, tag=26):
    """``count`` outputs of walk instance ``walk_id`` went to the client directly (a request
    with a `route`), from a piece that sends no `WalkDone` (the conductor counts the walk's
    emits instead, `WalkSpec.done_emits`) or a persisted value passed on to the client."""

    request: str
    walk_id: int
    count: int = 1


class Failed(Message, frozen=True, tag=18):
    """The request failed (`FailKind` says why; for a node's failure, `Cause` says whose
    fault it is)."""

    request: str
    kind: FailKind
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    rank: int | None = None
    cause: Cause | None = None


# ---------------------------------------------------------------- conductor -> client


class Output(Message, frozen=True, tag=19):
    """An emitted value, as the client sees it (``iters``: the emit's loop iterations);
    ``counted``: a rank sent it for a request with a `route` (straight to the client, or
    through the conductor when it could not): `Finished.outputs` counts it."""

    DATA: ClassVar[bool] = True
    request: str
    flow: str
    walk: str
    modality: str
    channel: str
    iters: tuple[int, ...] = ()
    data: Any = None
    counted: bool = False


class Finished(Message, frozen=True, tag=20):
    """The request ended: ``ok``, or failed with the error fields (as in `Failed`);
    ``outputs``: how many ``counted`` `Output`s the ranks sent its client (they travel on
    other sockets: the client ends the request once it has them all)."""

    request: str
    ok: bool
    kind: FailKind | None = None
    message: str | None = None
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    cause: Cause | None = None
    outputs: int = 0
