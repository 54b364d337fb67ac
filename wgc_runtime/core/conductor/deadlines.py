"""Deadlines: every wait has one, and a request that cannot move says what it waits for.

A walk not done within ``walk_timeout_s``, a request with no message for ``idle_timeout_s`` and a
request queued longer than ``queue_timeout_s`` end with a ``timeout`` error naming what they
waited for; `fail_stalled` ends every running request with a ``deadlock`` error when the caller
knows nothing can move.

Each such error ends with the host's ``notes`` on the request, when it has some (the process
deployment's: what it knows of rank deaths while the request ran, `RankWatch.notes`), so a hang
after a restart says whether the conductor heard of the death and why the request went on.

`Deadlines` owns the three timeouts and reads the request table, the queue and the walks'
deadlines; ending a request is the conductor's (``end``, ``finish_queued``).
"""

from __future__ import annotations

from collections.abc import Callable

from wgc_runtime.contract.kinds import FailKind, FlowKind
from wgc_runtime.core.conductor.admission import Admission
from wgc_runtime.core.conductor.state import Abort, RequestRun

End = Callable[[RequestRun, Abort | None], None]
FinishQueued = Callable[[str, FailKind, str], None]


class Deadlines:
    """Every wait's deadline (see the module docstring)."""

    def __init__(
        self,
        active: dict[str, RequestRun],
        admission: Admission,
        clock: Callable[[], float],
        *,
        walk_timeout_s: float,
        idle_timeout_s: float,
        queue_timeout_s: float,
        end: End,
        finish_queued: FinishQueued,
    ) -> None:
        self.active = active
        self.admission = admission
        self.clock = clock
        self.walk_timeout_s = walk_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.queue_timeout_s = queue_timeout_s
        self.end = end
        self.finish_queued = finish_queued
        # the host's words on a stalled request (`RankWatch.notes`); none in one process
        self.notes: Callable[[str], list[str]] | None = None

    def _noted(self, request_id: str, message: str) -> str:
        """``message`` with the host's notes on ``request_id`` (see the module docstring)."""
        notes = self.notes(request_id) if self.notes is not None else []
        return f"{message} [{'; '.join(notes)}]" if notes else message

    def waits(self, request_id: str) -> list[str]:
        """What each unfinished flow of a running request waits for, in words."""
        req = self.active.get(request_id)
        if req is None:
            return []
        out: list[str] = []
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
            elif f.ruled:
                out.append(
                    f"flow `{name}` waits for the owner of stream `{f.spec.stream}` to run its "
                    "chunks through the final one"
                )
            elif f.spec.kind is FlowKind.ON_STREAM:
                out.append(f"flow `{name}` waits for chunk {f.index} of stream `{f.spec.stream}`")
            else:
                out.append(f"flow `{name}` waits")
        return out

    def tick(self, now: float | None = None) -> None:
        """End every request whose wait ran past its deadline."""
        now = self.clock() if now is None else now
        queue = self.admission.queue
        for rid, (_, deadline) in list(queue.items()):
            if now > deadline:
                del queue[rid]
                pools = self.admission.kv_waits()
                cap = self.admission.max_concurrent
                why = f"KV pages: {pools}" if pools else f"{cap} requests run at once"
                self.finish_queued(
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
                self.end(
                    req,
                    Abort(
                        FailKind.TIMEOUT,
                        self._noted(
                            req.id,
                            f"walk `{w.spec.name}` did not finish within "
                            f"{self.walk_timeout_s:g} s ({why})",
                        ),
                        w.flow.spec.name,
                        w.spec.name,
                    ),
                )
            elif now - req.last_progress > self.idle_timeout_s:
                waits = "; ".join(self.waits(req.id)) or "nothing"
                self.end(
                    req,
                    Abort(
                        FailKind.TIMEOUT,
                        self._noted(req.id, f"no progress for {self.idle_timeout_s:g} s: {waits}"),
                    ),
                )

    def fail_stalled(self, why: str = "no rank can make progress") -> None:
        """End every running request with a deadlock error (the caller knows nothing moves)."""
        for req in list(self.active.values()):
            waits = "; ".join(self.waits(req.id)) or "nothing"
            message = self._noted(req.id, f"deadlock ({why}): {waits}")
            self.end(req, Abort(FailKind.DEADLOCK, message))
