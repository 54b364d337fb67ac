"""The conductor's side of a restart: which ranks are down, and which requests each rank holds.

`RankWatch` is plain bookkeeping (no sockets), fed by the conductor's loop
(`wgc_runtime.host.processes.conductor_main`):

* **who holds what**: every message the conductor sends to a rank for a request marks the
  request as held by that rank and by every rank with a piece of the walk the message names
  (`WalkSpec.ranks`: the ranks exchange the walk's values among themselves);
* **a rank died** (`RankDied` from the supervisor): `down` records it, and `on_rank_died` names
  the requests it held: those fail, the others go on. A request that later needs a rank that is
  down fails too (`needs_down`), at the moment the conductor would send to it;
* **a rank is back** (the supervisor's `Peers` update and `Ready`): `up`.

While a rank is down the conductor holds admission (`ConductorCore.hold_admission`): new
requests queue, with the queue's deadline, and start once every rank is back.
"""

from __future__ import annotations

from typing import Any

from wgc_runtime.contract.conductor import ConductorSpec


class RankWatch:
    """See the module docstring."""

    def __init__(self, spec: ConductorSpec) -> None:
        self.walk_ranks = {w.name: frozenset(w.ranks) for w in spec.walks}
        self.down: dict[int, str] = {}  # rank -> why
        self.held_by: dict[str, set[int]] = {}  # request -> the ranks that hold some of it

    # ---------------------------------------------------------------- who holds what

    def sent(self, rank: int, msg: Any) -> None:
        """The conductor sends ``msg`` to ``rank``."""
        request = getattr(msg, "request", None)
        if not request:
            return
        ranks = self.held_by.setdefault(request, set())
        ranks.add(rank)
        walk = getattr(msg, "walk", None)
        if walk is not None:
            ranks |= self.walk_ranks.get(walk, frozenset())

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

    def up(self, rank: int) -> bool:
        """Rank ``rank`` is back; whether every rank is."""
        self.down.pop(rank, None)
        return not self.down
