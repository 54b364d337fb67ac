"""The conductor's table of sessions: which exist, which has a request running, and which to
forget when a new one needs room.

A request names its session in the option `SESSION_OPTION`. `SessionTable.begin` admits it:
a session runs one request at a time, and at most ``max_sessions`` sessions are kept; a new
session past that evicts the least recently used idle one (the ranks are told to forget it,
`ForgetSession`), or is refused when every kept session has a request running (`FailKind.BUSY`,
HTTP 429). The ranks keep the pages (`wgc_runtime.core.executor.sessions`; a rank may also
evict a session for its page budget): a session is a cache of the conversation's prefix, so a
forgotten one only makes the next turn prefill whole. `wgc serve` lists (`GET /v1/sessions`)
and deletes (`DELETE /v1/sessions/{id}`) them here.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class SessionEntry:
    session: str
    used: float  # when its last request started or ended (the clock's seconds)
    request: str | None = None  # the request running it


class SessionTable:
    """The sessions a deployment keeps (see the module docstring)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.entries: OrderedDict[str, SessionEntry] = OrderedDict()  # least recent first
        self.by_request: dict[str, str] = {}

    def begin(self, session: str, request: str, now: float) -> tuple[str | None, list[str]]:
        """Admit ``request`` of ``session``: (why not, or None; the sessions to forget)."""
        entry = self.entries.get(session)
        if entry is not None and entry.request is not None:
            return f"session `{session}` has a request running; send its next turn after", []
        evict: list[str] = []
        if entry is None:
            while len(self.entries) >= self.max_sessions:
                idle = next((s for s, e in self.entries.items() if e.request is None), None)
                if idle is None:
                    return (
                        f"all {self.max_sessions} sessions have a request running; retry later",
                        evict,
                    )
                del self.entries[idle]
                evict.append(idle)
            entry = self.entries[session] = SessionEntry(session, now)
        entry.request, entry.used = request, now
        self.entries.move_to_end(session)
        self.by_request[request] = session
        return None, evict

    def end(self, request: str, ok: bool, now: float) -> str | None:
        """``request`` ended: its session is idle again; returns the session to forget when
        the request failed (its sequence may be half written)."""
        session = self.by_request.pop(request, None)
        entry = self.entries.get(session) if session is not None else None
        if entry is None or entry.request != request:
            return None
        entry.request, entry.used = None, now
        self.entries.move_to_end(entry.session)
        if not ok:
            del self.entries[entry.session]
            return entry.session
        return None

    def drop(self, session: str) -> bool:
        """Forget ``session`` (`DELETE`); a running request of it finishes without keeping it."""
        entry = self.entries.pop(session, None)
        if entry is not None and entry.request is not None:
            self.by_request.pop(entry.request, None)
        return entry is not None

    def listing(self, now: float) -> tuple[tuple[str, float, bool], ...]:
        """(session, seconds since last used, whether a request runs it), least recent first."""
        return tuple(
            (e.session, now - e.used, e.request is not None) for e in self.entries.values()
        )
