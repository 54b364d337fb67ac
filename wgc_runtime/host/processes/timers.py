"""What wakes an idle conductor (`conductor_main.ConductorLoop`): its deadlines' tick and the
clients' keep-alive, nothing else. Between them it sleeps until a message comes.

The core's deadlines (`ConductorCore.tick`: a walk's, a request's idle and queue timeouts) are
checked every twentieth of the shortest timeout, within `TICK_MIN_S`-`TICK_MAX_S` (`tick_every`:
0.5 s for the defaults, 120 s and more), and every client hears an `Alive` for each of its live
requests every `KEEPALIVE_S` (`wgc_runtime.host.client` fails a request that hears nothing).
A conductor that woke every 20 ms instead spent CPU in proportion to a request's length waking to
find nothing due (issue 29's flat conductor CPU; benchmarks/README.md, "The conductor's CPU per
request, flat").
"""

from __future__ import annotations

import math

KEEPALIVE_S = 1.0
TICK_MIN_S, TICK_MAX_S = 0.02, 0.5


def tick_every(walk_timeout_s: float, idle_timeout_s: float, queue_timeout_s: float) -> float:
    """How often the conductor checks its deadlines."""
    shortest = min(walk_timeout_s, idle_timeout_s, queue_timeout_s)
    return min(TICK_MAX_S, max(TICK_MIN_S, shortest / 20))


class Timers:
    """When the tick and the keep-alive are next due (monotonic seconds)."""

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.next_tick = 0.0  # the first turn ticks
        self.last_keepalive = 0.0

    def sleep_ms(self, now: float) -> int:
        """How long the loop may sleep before something is due (0: at once)."""
        due = min(self.next_tick, self.last_keepalive + KEEPALIVE_S) - now
        return max(0, math.ceil(due * 1000))

    def tick(self, now: float) -> bool:
        """Whether the deadlines are due (then the next tick counts from ``now``)."""
        if now < self.next_tick:
            return False
        self.next_tick = now + self.tick_s
        return True

    def keepalive(self, now: float) -> bool:
        """Whether the keep-alive is due (then the next counts from ``now``)."""
        if now - self.last_keepalive < KEEPALIVE_S:
            return False
        self.last_keepalive = now
        return True
