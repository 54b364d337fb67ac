"""The conductor's side of a restart: which ranks are down, and which requests each rank holds.

`RankWatch` is plain bookkeeping (no sockets), fed by the conductor's loop
(`wgc_runtime.host.processes.conductor_main`):

* **who holds what**: every message the conductor sends to a rank for a request marks the
  request as held by that rank and by every rank the walk the message names may leave state
  on (`reach`): its pieces' ranks (they exchange the walk's values among themselves), the ranks
  of its handoffs and KV copies (pages), and the owner of every stream a rank of the walk
  produces into (the consumer's buffer: items the conductor never sees, pushed rank to rank
  before the consuming flow starts, which a dead owner loses). A restarted rank holds no pages,
  loop copies or stream items, so that state is lost; what becomes of its request is the plan's
  choice, per piece (`WalkSpec.restart_on`: the walk's piece on that rank, else the walk; the
  placement's ``on_restart:``): ``fail`` (the default) or ``replay`` (a walk that may feed a stream
  whose owner runs its chunk walks itself, `StreamSpec.chunk_walk`, replays only when that walk
  does too, on every rank). Each (request, rank) remembers whether every piece that may have left
  state there replays (`replays`); a state
  move (no walk named) takes the request's own answer;
* **a rank died** (`RankDied` from the supervisor): `down` records it, and `on_rank_died` names
  the requests it held: each is replayed from its start (`ConductorCore.replay`) when `replays`
  says so (outputs the client already has are checked, not sent again:
  `wgc_runtime.core.conductor.replay`), and fails otherwise; the others go on. A
  request that later needs a rank that is down fails too (`needs_down`), at the moment the
  conductor would send to it;
* **a rank is back** (the supervisor's `Peers` update and `Ready`): `up`;
* **a request that stalls** (the conductor's watchdog, `Deadlines.notes`): `notes` says what the
  conductor knows of the ranks' deaths while it ran: the ranks that are down, and each death it
  went on through because the conductor had sent it nothing that reaches that rank (if it did
  hold state there after all, that is why it waits).

While a rank is down the conductor holds admission (`ConductorCore.hold_admission`): new
requests queue, with the queue's deadline, and start once every rank is back.
"""

from __future__ import annotations

from typing import Any

from wgc_runtime.contract.conductor import ConductorSpec, WalkSpec
from wgc_runtime.contract.kinds import OnRestart


def reach(spec: ConductorSpec, walk: WalkSpec) -> frozenset[int]:
    """Every rank a request running ``walk`` may hold state on (see the module docstring)."""
    ranks = set(walk.ranks)
    for move in (*walk.handoffs, *walk.kv_copies):
        ranks |= {*move.from_ranks, *move.to_ranks}
    # a stream fed on one of these ranks buffers its items on its owner (the consumer's rank),
    # whose consumer may feed a stream of its own: to the fixed point
    while True:
        more = {s.owner for s in spec.streams if ranks & set(s.producer_ranks)} - ranks
        if not more:
            return frozenset(ranks)
        ranks |= more


class RankWatch:
    """See the module docstring."""

    def __init__(self, spec: ConductorSpec) -> None:
        self.walk_ranks = {w.name: reach(spec, w) for w in spec.walks}
        self.walks = {w.name: w for w in spec.walks}
        # a stream's standing rule (`StreamSpec.chunk_walk`) starts its chunk walks on the owner
        # with no message from here: a walk that may feed the stream replays only if they do
        self.no_replay: set[str] = set()
        for st in spec.streams:
            chunk = self.walks.get(st.chunk_walk or "")
            if chunk is not None and not all(
                chunk.restart_on(r) is OnRestart.REPLAY for r in chunk.ranks
            ):
                self.no_replay |= {
                    w.name for w in spec.walks if set(w.ranks) & set(st.producer_ranks)
                }
        self.down: dict[int, str] = {}  # rank -> why
        # request -> the ranks that hold some of it -> whether every walk that may have left
        # state there replays
        self.held_by: dict[str, dict[int, bool]] = {}
        # request -> the deaths it went on through (it held nothing on the rank): `notes`
        self.outlived: dict[str, list[str]] = {}

    # ---------------------------------------------------------------- who holds what

    def sent(self, rank: int, msg: Any) -> None:
        """The conductor sends ``msg`` to ``rank``."""
        request = getattr(msg, "request", None)
        if not request:
            return
        held = self.held_by.setdefault(request, {})
        walk = getattr(msg, "walk", None)
        if walk is not None:
            ranks = {rank, *self.walk_ranks.get(walk, frozenset())}
            spec = self.walks.get(walk)
            for r in ranks:  # the walk's piece there decides (a rank without one: the walk)
                replays = (
                    spec is not None
                    and spec.restart_on(r) is OnRestart.REPLAY
                    and walk not in self.no_replay
                )
                held[r] = held.get(r, True) and replays
        else:
            # a state move (`ExportState`, `CopyKv`) names no walk: where the state goes, with
            # the request's own answer (the state is of walks it ran)
            replays = all(held.values())
            for r in {rank, *getattr(msg, "to_ranks", ())}:
                held[r] = held.get(r, True) and replays

    def replays(self, request: str, rank: int) -> bool:
        """Whether ``request``'s state on ``rank`` is all of walks that replay on a restart."""
        return self.held_by.get(request, {}).get(rank, False)

    def ended(self, request: str) -> None:
        self.held_by.pop(request, None)
        self.outlived.pop(request, None)

    def notes(self, request: str) -> list[str]:
        """What the conductor knows of rank deaths during ``request``, in words (for a stalled
        request's error: `Deadlines.notes`)."""
        out = [f"rank {r} is down ({why})" for r, why in sorted(self.down.items())]
        out += self.outlived.get(request, [])
        return out or ["no rank died while it ran, as far as the conductor knows"]

    # ---------------------------------------------------------------- down and up

    def on_rank_died(self, rank: int, why: str, running: list[str]) -> list[str]:
        """Rank ``rank`` is down; the running requests it held (they must fail)."""
        self.down[rank] = why
        held = [rid for rid in running if rank in self.held_by.get(rid, ())]
        for rid in running:
            if rank not in self.held_by.get(rid, ()):
                self.outlived.setdefault(rid, []).append(
                    f"rank {rank} died while it ran ({why}) and it went on: the conductor had "
                    f"sent it nothing that reaches rank {rank}"
                )
        return held

    def needs_down(self, rank: int) -> str | None:
        """Why a message cannot go to ``rank`` now (None: it is up)."""
        return self.down.get(rank)

    def blocked(self, rank: int, msg: Any) -> int | None:
        """A rank that is down which ``msg`` to ``rank`` needs: ``rank`` itself, or one a state
        move it asks for goes to (its parts would be lost on the way); None when all are up."""
        for r in (rank, *getattr(msg, "to_ranks", ())):
            if r in self.down:
                return r
        return None

    def up(self, rank: int) -> bool:
        """Rank ``rank`` is back; whether every rank is."""
        self.down.pop(rank, None)
        return not self.down
