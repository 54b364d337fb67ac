"""What the conductor keeps per request: its flows, the walks they wait for, where its state is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from wgc_runtime.contract.conductor import FlowSpec, WalkSpec
from wgc_runtime.contract.flow import Request
from wgc_runtime.contract.kinds import Cause, FailKind
from wgc_runtime.contract.messages import ChunkReady

CONDUCTOR_KEEPS = -1  # `WalkSpec.persists`: a persisted walk input the conductor holds

# typed default factories for the records' fields (the builtins themselves: a subscripted
# ``dict[K, V]()`` costs ~8x a ``dict()``, and walk runs are made on the hot path)
new_dict = cast("Callable[[], dict[Any, Any]]", dict)
new_set = cast("Callable[[], set[Any]]", set)


class Abort(Exception):
    """Raised inside the conductor to end one request with an error."""

    def __init__(
        self,
        kind: FailKind,
        message: str,
        flow: str | None = None,
        walk: str | None = None,
        node: str | None = None,
        cause: Cause | None = None,
    ) -> None:
        super().__init__(message)
        self.kind, self.message, self.flow, self.walk, self.node = kind, message, flow, walk, node
        self.cause = cause


@dataclass(eq=False)
class FlowRun:
    """One flow of one request."""

    spec: FlowSpec
    gen: Any = None
    waiting: int | None = None  # walk id
    done: bool = False
    # on_stream: ready chunks
    chunks: dict[int, ChunkReady] = field(default_factory=new_dict)
    index: int = 0  # on_stream: the chunk the body runs for (or waits for)
    current: ChunkReady | None = None
    ruled: bool = False  # on_stream with a standing rule: the owner rank runs it


@dataclass(eq=False)
class WalkWait:
    """A walk instance a flow waits for."""

    flow: FlowRun
    spec: WalkSpec
    pending: set[int]
    deadline: float
    # node-state moves before the walk starts: (node, rank) imports not yet confirmed, and
    # what starts the walk once they are
    moving: set[tuple[str, int]] = field(default_factory=new_set)
    start: Any = None  # Callable[[], None] | None
    # emits still to come before the walk is done (`WalkSpec.done_emits`: `ClientOut`s, or the
    # counts of a routed request's direct outputs)
    emits: int = 0

    def done(self) -> bool:
        return not self.pending and self.emits <= 0

    def waits_for(self) -> str:
        """What the walk still waits for, in words (for timeout and deadlock errors)."""
        ranks = ", ".join(str(r) for r in sorted(self.pending))
        parts = [f"ranks {ranks}"] if ranks else []
        if self.emits > 0:
            parts.append(f"{self.emits} emits")
        return " and ".join(parts) or "nothing"


@dataclass(eq=False)
class RequestRun:
    """One running request."""

    id: str
    request: Request
    flows: dict[str, FlowRun] = field(default_factory=new_dict)
    walks: dict[int, WalkWait] = field(default_factory=new_dict)
    persist_loc: dict[tuple[str, str], int] = field(default_factory=new_dict)
    # conductor-held persists
    kept: dict[tuple[str, str], Any] = field(default_factory=new_dict)
    streams_done: set[str] = field(default_factory=new_set)
    streams_abandoned: set[str] = field(default_factory=new_set)
    # node -> its group
    state_at: dict[str, tuple[int, ...]] = field(default_factory=new_dict)
    # the ranks that hold something of the request (`Release` when it ends normally): the
    # stream owners and every rank of its walks but `WalkSpec.no_release`
    holds: set[int] = field(default_factory=new_set)
    last_progress: float = 0.0
    ended: bool = False
    sent: int = 0  # outputs of it that went to the client (or were checked: `replay`)
    outputs: int = 0  # outputs the ranks sent its client directly (`Finished.outputs`)
    # where some piece replays (`replay.may_replay`): the digests of what its client has, and
    # of what a replay must reproduce before it sends anything new (`replay.guard_output`)
    delivered: dict[Any, Any] | None = None
    expected: dict[Any, Any] = field(default_factory=new_dict)
