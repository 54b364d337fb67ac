"""Sessions on one rank: a conversation's KV pages (and its kv-cache nodes' state) kept pinned
between its requests, up to a budget.

A request names its session in the option `SESSION_OPTION` (the entry points set it from the
request's ``session`` field). When the request's first walk starts here, `Sessions.adopt` moves
the session's parked pages in every pool of the rank back under the request's id (`rename`,
no copy) and hands the kv-cache nodes their state dicts of the last turn, so a node sees the
conversation's sequence as its own and prefills only what is new. When the request ends,
`park` moves them under the session's key again instead of freeing them. A failed request drops
its session (its sequence may be half written).

Budget: ``max_sessions`` parked sessions and ``max_pages`` pages parked per pool (default: half
the pool; the conductor never promises those pages to requests); parking past either evicts
the least recently used idle sessions first (a session larger than the whole budget is dropped
at once). A session is used by one request at a time: a second concurrent
request of it is refused (`SessionBusy`, HTTP 429 at the server).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.flow import SESSION_OPTION
from wgc_runtime.contract.kinds import Engine, FailKind
from wgc_runtime.contract.messages import ForgetSession
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.core.conductor.admission import parked_pages
from wgc_runtime.core.executor.state import RequestAbort, RequestState, WalkRun, new_dict
from wgc_runtime.engines.kv_pools import KvPools


class SessionBusy(RuntimeError):
    """A session already has a request running."""


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A parked session's key in the pools (never equal to a request id, which is a str)."""

    session: str


@dataclass(slots=True)
class Parked:
    """One parked session: its pages per pool key, its nodes' state, and when it was used."""

    pages: dict[str, int]
    node_state: dict[str, dict[str, Any]] = field(default_factory=new_dict)
    used: float = 0.0


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What `Sessions.list` says of one session."""

    session: str
    pages: int
    idle_s: float
    active: bool


class Sessions:
    """The rank's sessions (see the module docstring). ``max_sessions`` 0: sessions are off."""

    def __init__(self, kv: KvPools, *, max_sessions: int = 0, max_pages: int = 0) -> None:
        self.kv = kv
        self.max_sessions = max_sessions
        self.max_pages = max_pages
        self.parked: OrderedDict[str, Parked] = OrderedDict()  # least recently used first
        self.active: dict[str, str] = {}  # session -> the request running it
        self.evicted = 0

    @classmethod
    def of_rank(cls, rank: RankSpec, kv: KvPools) -> Sessions:
        """The placement's ``sessions:`` as the rank runs them."""
        c = rank.kv_cache
        return cls(kv, max_sessions=c.max_sessions, max_pages=c.session_pages)

    @property
    def enabled(self) -> bool:
        return self.max_sessions > 0

    def adopt(self, session: str, request: str) -> dict[str, dict[str, Any]]:
        """``request`` runs ``session``: its parked pages become the request's. Returns the
        nodes' state dicts of the session's last turn ({} for a new session)."""
        running = self.active.get(session)
        if running is not None and running != request:
            raise SessionBusy(f"session `{session}` has request `{running}` running")
        if running is None and session not in self.parked and len(self.active) >= self.max_sessions:
            raise SessionBusy(f"all {self.max_sessions} sessions have a request running")
        self.active[session] = request
        parked = self.parked.pop(session, None)
        if parked is None:
            return {}
        for pool in self.kv.pools.values():
            pool.rename(SessionKey(session), request)
        return parked.node_state

    def park(self, session: str, request: str, node_state: dict[str, dict[str, Any]]) -> None:
        """``request`` of ``session`` ended: keep its pages and state, then fit the budget."""
        if self.active.pop(session, None) != request:
            return  # forgotten while it ran: its pages are freed with the request's
        self.drop(session)  # a copy parked here that this request did not take (never expected)
        pages = {k: p.rename(request, SessionKey(session)) for k, p in self.kv.pools.items()}
        self.parked[session] = Parked(pages, node_state, time.monotonic())
        self._fit()

    def drop(self, session: str, request: str | None = None) -> bool:
        """Forget ``session`` and free its pages (`DELETE`, or its request failed). Returns
        whether it existed."""
        if request is None or self.active.get(session) == request:
            self.active.pop(session, None)  # a running request of it keeps nothing at its end
        parked = self.parked.pop(session, None)
        if parked is None:
            return False
        for pool in self.kv.pools.values():
            pool.free(SessionKey(session))
        return True

    def list(self) -> list[SessionInfo]:
        now = time.monotonic()
        out = [
            SessionInfo(s, sum(p.pages.values()), now - p.used, s in self.active)
            for s, p in self.parked.items()
        ]
        out += [SessionInfo(s, 0, 0.0, True) for s in self.active if s not in self.parked]
        return out

    def pages_parked(self) -> dict[str, int]:
        """Pages parked per pool key."""
        return {k: sum(s.pages.get(k, 0) for s in self.parked.values()) for k in self.kv.pools}

    def _fit(self) -> None:
        """Evict least recently used sessions until the budget holds."""
        while self.parked and (len(self.parked) > self.max_sessions or self._over_pages()):
            oldest = next(iter(self.parked))
            self.drop(oldest)
            self.evicted += 1

    def _over_pages(self) -> bool:
        parked = self.pages_parked()
        return any(
            parked[k] > parked_pages(self.max_sessions, self.max_pages, p.num_pages)
            for k, p in self.kv.pools.items()
        )


# ---------------------------------------------------------------- the executor's part


class RankSessions:
    """The executor's side of sessions: the rank's `Sessions`, and which request runs which
    session here (adopted at its first walk, parked or dropped at its end)."""

    def __init__(self, sessions: Sessions, engines: dict[str, Engine]) -> None:
        self.sessions = sessions
        self.engines = engines
        self.of_request: dict[str, str] = {}  # request -> the session it runs, once adopted

    def begin(self, w: WalkRun) -> None:
        """The request's first walk here names a session (`SESSION_OPTION`): its kept pages
        and kv nodes' state become the request's own."""
        session = w.options.get(SESSION_OPTION)
        if session is None or w.req.id in self.of_request:
            return
        if not self.sessions.enabled:
            raise RequestAbort(
                FailKind.REJECTED, "the placement keeps no sessions (`sessions:`)", w.walk
            )
        try:
            kept = self.sessions.adopt(str(session), w.req.id)
        except SessionBusy as exc:
            raise RequestAbort(FailKind.BUSY, str(exc), w.walk) from None
        self.of_request[w.req.id] = str(session)
        for name, st in kept.items():
            w.req.node_state.setdefault(name, {}).update(st)

    def end(self, req: RequestState) -> None:
        """The request ended: its session, if it runs one, keeps its pages and kv nodes'
        state."""
        session = self.of_request.pop(req.id, None)
        if session is None:
            return
        kept = {n: st for n, st in req.node_state.items() if self.engines.get(n) is Engine.KV_CACHE}
        self.sessions.park(session, req.id, kept)

    def drop(self, request: str) -> None:
        """The request failed: its session is forgotten with it."""
        session = self.of_request.pop(request, None)
        if session is not None:
            self.sessions.drop(session, request)

    def on_forget(self, m: ForgetSession) -> None:
        """The conductor forgot the session (evicted, deleted, or its request failed)."""
        self.sessions.drop(m.session)
