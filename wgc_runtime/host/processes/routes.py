"""What the conductor process tells a client about the ranks' client-out sockets (`RankRoutes`):
every rank's address from the launcher's `Peers` table (`Hello.client`), offered to a client
that asks (`GetRoutes`) only when every rank has one, the plan never replays a request (a
replay's outputs are checked at the conductor, `wgc_runtime.core.conductor.replay`) and
``WGC_DIRECT_OUT`` is on; see `wgc_runtime.contract.route`.
"""

from __future__ import annotations

from wgc_runtime.contract import control as c


class RankRoutes:
    """The ranks' client-out addresses (see the module docstring)."""

    def __init__(self, world_size: int, enabled: bool) -> None:
        self.world_size = world_size
        self.enabled = enabled
        self.by_rank: dict[int, str] = {}

    def addresses(self) -> tuple[str, ...]:
        """Every rank's client-out address, in rank order; none: outputs go through the
        conductor."""
        if not self.enabled or len(self.by_rank) < self.world_size:
            return ()
        return tuple(self.by_rank[r] for r in range(self.world_size))

    def learn(self, table: tuple[c.PeerEntry, ...]) -> None:
        """The addresses in a `Peers` table (a restarted rank's entry replaces its old one; a
        rank without one has none)."""
        for entry in table:
            if isinstance(entry.who, int):
                if entry.client:
                    self.by_rank[entry.who] = entry.client
                else:
                    self.by_rank.pop(entry.who, None)
