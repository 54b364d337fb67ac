"""The control protocols: launcher <-> child processes, client <-> conductor, and the transport's
own messages. Typed messages like the cores' (`wgc_runtime.contract.messages`): msgspec Structs
with int tags (distinct across every protocol), decoded with validation into exactly the types a
socket accepts (`INBOX`, `CLIENT_IN`, `CLIENT_OUT`).

Launcher protocol (over every process's inbox):

=====================  =========================  ==============================================
message                from -> to                 meaning
=====================  =========================  ==============================================
`Hello`                child -> launcher          my inbox address (the conductor: and its
                                                  client address)
`Peers`                launcher -> child          everybody's address
`Progress`             child -> launcher          a line to show while loading
`Ready`                child -> launcher          loaded and warmed up
`StartFailed`          child -> launcher          could not start (``error`` says why)
`Shutdown`             launcher -> child          leave the loop and exit
`RankDied`             launcher -> conductor      a worker process is gone
`GetUsage`             launcher -> child          report what you hold
`Usage`                child -> launcher          live requests, KV pages held or promised,
                                                  frames dropped; a rank's node calls and
                                                  stream buffers (`GetUsage`'s answer)
`ArenaFree`            any -> arena block owner   the receiver is done with these blocks
=====================  =========================  ==============================================

Client protocol (a ``DEALER`` client and the conductor's ``ROUTER``): `Submit`, `Cancel`,
`Ping`, `GetStats`, `GetSessions` and `GetRoutes` in; `Accepted`, `Output`, `Alive`,
`Finished`, `Pong`, `Stats`, `WalkTrace`, `SessionList` and `Routes` out (`Output` and
`Finished` are the core messages of the same names). A client asking for direct outputs also
connects a ``DEALER`` (the same identity) to each rank's client-out ``ROUTER`` (`Routes`): `Ping`
in, `Pong` and `Output` out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from wgc_runtime.contract.messages import CORE, Finished, Message, Output, StreamItems

PeerName = int | str  # a rank, "conductor" or "launcher"


# ---------------------------------------------------------------- launcher <-> children


class Hello(Message, frozen=True, tag=40):
    who: PeerName
    address: str
    host: str = "127.0.0.1"
    ipc: str | None = None
    client: str | None = None  # the conductor's client address; a rank's client-out address


class PeerEntry(Message, frozen=True, tag=41):
    who: PeerName
    address: str
    host: str = "127.0.0.1"
    ipc: str | None = None
    client: str | None = None  # a rank's client-out address (its `Hello.client`)


class Peers(Message, frozen=True, tag=42):
    table: tuple[PeerEntry, ...]


class Progress(Message, frozen=True, tag=43):
    who: PeerName
    text: str


class Ready(Message, frozen=True, tag=44):
    who: PeerName
    seconds: float = 0.0


class StartFailed(Message, frozen=True, tag=45):
    who: PeerName
    error: str


class Shutdown(Message, frozen=True, tag=46):
    pass


class RankDied(Message, frozen=True, tag=47):
    """A worker died; ``restarting``: the launcher is starting it again (else the run ends)."""

    who: str
    reason: str
    restarting: bool = False


class GetUsage(Message, frozen=True, tag=49):
    """Ask a child for its `Usage`."""


class NodeCalls(msgspec.Struct, frozen=True, array_like=True):
    """One node's calls on a rank since it started (`Usage.nodes`): cumulative counts per
    bucket of `Usage.call_buckets` then +Inf (seconds per call), their sum, cumulative counts
    per bucket of `Usage.batch_buckets` then +Inf (rows per call), and the rows in all."""

    node: str
    calls: tuple[int, ...]
    seconds: float
    sizes: tuple[int, ...]
    rows: int


class StreamFill(msgspec.Struct, frozen=True, array_like=True):
    """One stream's buffers on the rank that owns it since it started (`Usage.streams`): the
    fill (items held / capacity) after each accepted item, as cumulative counts per bucket of
    `Usage.fill_buckets` then +Inf and their sum; consumers that found no chunk ready
    (underruns); and the items its live buffers hold now."""

    stream: str
    fills: tuple[int, ...]
    fill_sum: float
    underruns: int
    held: int


class Usage(Message, frozen=True, tag=50):
    """What a child holds now: live requests, KV pages per pool (a rank: pages in use; the
    conductor: pages promised by admission), and bad traffic its sockets dropped (frames, peers
    cut off); a rank also its node calls and stream buffers (`NodeCalls`, `StreamFill`, with
    their histograms' bucket bounds)."""

    who: PeerName
    requests: int = 0
    kv_pages: tuple[tuple[str, int], ...] = ()
    dropped: int = 0
    cut_off: int = 0
    call_buckets: tuple[float, ...] = ()
    batch_buckets: tuple[float, ...] = ()
    fill_buckets: tuple[float, ...] = ()
    nodes: tuple[NodeCalls, ...] = ()
    streams: tuple[StreamFill, ...] = ()


class ArenaFree(Message, frozen=True, tag=48):
    """The sender is done with these (offset, generation) blocks of the receiver's arena region."""

    blocks: tuple[tuple[int, int], ...]


# ---------------------------------------------------------------- client <-> conductor


class InputSegment(Message, frozen=True, tag=60):
    """One input segment: a modality, its payload (text, a tensor, a number ...) and fields."""

    modality: str
    data: Any = None
    fields: dict[str, Any] = msgspec.field(default_factory=dict[str, Any])


class Submit(Message, frozen=True, tag=61):
    """Run a request: its input segments in order, the wanted output modalities, options;
    ``seed``: what its nodes seed from (default: its id); ``trace``: send `WalkTrace`s."""

    request: str
    inputs: tuple[InputSegment, ...] = ()
    want: tuple[str, ...] = ()
    options: dict[str, Any] = msgspec.field(default_factory=dict[str, Any])
    seed: int | None = None
    trace: bool = False
    session: str | None = None  # the session it continues (the placement's `sessions:`)
    # > 0: the client's number of the request, asking for its outputs straight from the ranks
    # (the client is connected to every rank of `Routes`; `contract.route`); 0: through here
    direct: int = 0


class Cancel(Message, frozen=True, tag=62):
    request: str


class Ping(Message, frozen=True, tag=63):
    pass


class Accepted(Message, frozen=True, tag=64):
    """The request is admitted and waits behind the admission cap (``queued``). A request that
    starts at once gets no `Accepted`: its outputs are the first reply (one round trip less)."""

    request: str
    queued: bool = False


class Alive(Message, frozen=True, tag=65):
    """A keep-alive for a live request: the conductor still works on it."""

    request: str


class Pong(Message, frozen=True, tag=66):
    pass


class GetStats(Message, frozen=True, tag=67):
    """Ask for the conductor's `Stats`."""


class Stats(Message, frozen=True, tag=68):
    """The conductor's counters: requests running and queued, requests ended per outcome
    (``ok`` or a `FailKind`), and per walk its latency histogram: (walk, cumulative counts per
    bucket of ``buckets`` then +Inf, sum of seconds, count)."""

    running: int
    queued: int
    buckets: tuple[float, ...]
    outcomes: tuple[tuple[str, int], ...] = ()
    walks: tuple[tuple[str, tuple[int, ...], float, int], ...] = ()


class WalkTrace(Message, frozen=True, tag=69):
    """A walk of a traced request started (``done`` false) or finished after ``seconds``."""

    request: str
    flow: str
    walk: str
    done: bool
    seconds: float = 0.0


class GetSessions(Message, frozen=True, tag=70):
    """Ask for the conductor's `SessionList`; ``drop``: forget that session first."""

    drop: str | None = None


class SessionList(Message, frozen=True, tag=71):
    """The sessions kept: (id, seconds since last used, whether a request runs it), least
    recently used first; ``dropped``: whether the asked `GetSessions.drop` existed."""

    sessions: tuple[tuple[str, float, bool], ...] = ()
    max_sessions: int = 0
    dropped: bool = False


class GetRoutes(Message, frozen=True, tag=72):
    """Ask for the ranks' client-out addresses (`Routes`)."""


class Routes(Message, frozen=True, tag=73):
    """Every rank's client-out address, in rank order; empty: outputs come through the
    conductor (some rank has none, the plan may replay requests, or ``WGC_DIRECT_OUT=0``). A
    client that connected to each (a `Ping` answered by its `Pong`) may ask for direct outputs
    (`Submit.direct`)."""

    addresses: tuple[str, ...] = ()


LAUNCHER = (
    Hello,
    Peers,
    Progress,
    Ready,
    StartFailed,
    Shutdown,
    RankDied,
    GetUsage,
    Usage,
    ArenaFree,
)
# what a rank's or the conductor's inbox accepts (`StreamItems`: the transport packs items)
INBOX = (*CORE, StreamItems, *LAUNCHER)
CLIENT_IN = (
    Submit,
    Cancel,
    Ping,
    GetStats,
    GetSessions,
    GetRoutes,
)  # what the conductor's client port accepts (a rank's: `Ping` alone)
CLIENT_OUT = (
    Accepted,
    Output,
    Alive,
    Finished,
    Pong,
    Stats,
    WalkTrace,
    SessionList,
    Routes,
)  # what a client accepts
