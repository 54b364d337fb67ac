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
  choice, per walk (`WalkSpec.on_restart`, the placement's ``on_restart:``): ``fail`` (the
  default) or ``replay`` (a walk that may feed a stream whose owner runs its chunk walks itself,
  `StreamSpec.chunk_walk`, replays only when that walk does too). Each (request, rank)
  remembers whether every walk that may have left state there replays (`replays`); a state
  move (no walk named) takes the request's own answer;
* **a rank died** (`RankDied` from the supervisor): `down` records it, and `on_rank_died` names
  the requests it held: each is replayed from its start (`ConductorCore.replay`) when `replays`
  says so and none of its outputs reached the client, and fails otherwise; the others go on. A
  request that later needs a rank that is down fails too (`needs_down`), at the moment the
  conductor would send to it;
* **a rank is back** (the supervisor's `Peers` update and `Ready`): `up`.

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
        self.replaying = {w.name for w in spec.walks if w.on_restart is OnRestart.REPLAY}
        # a stream's standing rule (`StreamSpec.chunk_walk`) starts its chunk walks on the owner
        # with no message from here: a walk that may feed the stream replays only if they do
        for st in spec.streams:
            if st.chunk_walk and st.chunk_walk not in self.replaying:
                feeds = {w.name for w in spec.walks if set(w.ranks) & set(st.producer_ranks)}
                self.replaying -= feeds
        self.down: dict[int, str] = {}  # rank -> why
        # request -> the ranks that hold some of it -> whether every walk that may have left
        # state there replays
        self.held_by: dict[str, dict[int, bool]] = {}

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
            replays = walk in self.replaying
        else:
            # a state move (`ExportState`, `CopyKv`) names no walk: where the state goes, with
            # the request's own answer (the state is of walks it ran)
            ranks = {rank, *getattr(msg, "to_ranks", ())}
            replays = all(held.values())
        for r in ranks:
            held[r] = held.get(r, True) and replays

    def replays(self, request: str, rank: int) -> bool:
        """Whether ``request``'s state on ``rank`` is all of walks that replay on a restart."""
        return self.held_by.get(request, {}).get(rank, False)

    def ended(self, request: str) -> None:
        self.held_by.pop(request, None)

    # ---------------------------------------------------------------- down and up

    def on_rank_died(self, rank: int, why: str, running: list[str]) -> list[str]:
        """Rank ``rank`` is down; the running requests it held (they must fail)."""
        self.down[rank] = why
        return [rid for rid in running if rank in self.held_by.get(rid, ())]

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
