"""The conductor process's side of a replay: a request a dead rank held runs again from its
start, for the same client, when the plan's walks that left state there say ``replay``
(`wgc_runtime.host.processes.recovery`; the core's side is `wgc_runtime.core.conductor.replay`).

The replay runs under a new internal id (`RequestIds.successor`: the ranks drop what still
arrives for the old one), and the client's id, its connection and its trace follow it there;
the lost run counts as outcome ``replayed`` in the conductor's stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wgc_runtime.host.processes.conductor_main import ConductorLoop


def replay(loop: ConductorLoop, internal: str, rank: int) -> str | None:
    """Replay ``internal``, which dead rank ``rank`` held; None when it will run again, else
    why it fails instead."""
    if not loop.watch.replays(internal, rank):
        return "its walks there fail on a restart (the placement's `on_restart`)"
    new = loop.ids.successor(internal)
    why = loop.core.replay(internal, new)
    if why is not None:
        return f"it cannot be replayed: {why}"
    loop.ids.move(internal, new)
    loop.watch.ended(internal)
    ident = loop.clients.pop(internal, None)
    if ident is not None:
        loop.clients[new] = ident
    traced = internal in loop.stats.traced
    loop.stats.ended(internal, "replayed")  # the lost run's walk timings go
    if traced:
        loop.stats.traced.add(new)
    return None
