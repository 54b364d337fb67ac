"""Deadlines: every wait has one, and a request that cannot move says what it waits for.

A walk not done within ``walk_timeout_s``, a request with no message for ``idle_timeout_s`` and a
request queued longer than ``queue_timeout_s`` end with a ``timeout`` error naming what they
waited for; `fail_stalled` ends every running request with a ``deadlock`` error when the caller
knows nothing can move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc_runtime.contract.kinds import FailKind, FlowKind
from wgc_runtime.core.conductor.state import (
    Abort,
)

if TYPE_CHECKING:
    from wgc_runtime.core.conductor.core import ConductorCore


def waits(self: ConductorCore, request_id: str) -> list[str]:
    """What each unfinished flow of a running request waits for, in words."""
    req = self.active.get(request_id)
    if req is None:
        return []
    out = []
    for name, f in req.flows.items():
        if f.done:
            continue
        wait = req.walks.get(f.waiting) if f.waiting is not None else None
        if wait is not None and wait.moving:
            moves = ", ".join(f"`{n}` to rank {r}" for n, r in sorted(wait.moving))
            out.append(
                f"flow `{name}` waits for node state to move before walk "
                f"`{wait.spec.name}` ({moves})"
            )
        elif wait is not None:
            out.append(f"flow `{name}` waits for walk `{wait.spec.name}` ({wait.waits_for()})")
        elif f.spec.kind is FlowKind.ON_STREAM:
            out.append(f"flow `{name}` waits for chunk {f.index} of stream `{f.spec.stream}`")
        else:
            out.append(f"flow `{name}` waits")
    return out


def tick(self: ConductorCore, now: float | None = None) -> None:
    """End every request whose wait ran past its deadline."""
    now = self.clock() if now is None else now
    for rid, (_, deadline) in list(self.queue.items()):
        if now > deadline:
            del self.queue[rid]
            pools = self.kv_waits()
            why = f"KV pages: {pools}" if pools else f"{self.max_concurrent} requests run at once"
            self._finish_queued(
                rid,
                FailKind.TIMEOUT,
                f"request waited more than {self.queue_timeout_s:g} s for admission ({why})",
            )
    for req in list(self.active.values()):
        late = [w for w in req.walks.values() if now > w.deadline]
        if late:
            w = late[0]
            why = f"{w.waits_for()} have not reported"
            if w.moving:
                moves = ", ".join(f"`{n}` to rank {r}" for n, r in sorted(w.moving))
                why = f"node state still moving before it starts: {moves}"
            self._end(
                req,
                Abort(
                    FailKind.TIMEOUT,
                    f"walk `{w.spec.name}` did not finish within {self.walk_timeout_s:g} s ({why})",
                    w.flow.spec.name,
                    w.spec.name,
                ),
            )
        elif now - req.last_progress > self.idle_timeout_s:
            waits = "; ".join(self.waits(req.id)) or "nothing"
            self._end(
                req,
                Abort(
                    FailKind.TIMEOUT,
                    f"no progress for {self.idle_timeout_s:g} s: {waits}",
                ),
            )


def fail_stalled(self: ConductorCore, why: str = "no rank can make progress") -> None:
    """End every running request with a deadlock error (the caller knows nothing moves)."""
    for req in list(self.active.values()):
        waits = "; ".join(self.waits(req.id)) or "nothing"
        self._end(req, Abort(FailKind.DEADLOCK, f"deadlock ({why}): {waits}"))
