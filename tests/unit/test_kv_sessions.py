"""A rank's sessions (`wgc_runtime.core.executor.sessions`) over a real page pool: parking moves
a request's pages under the session's key (no copy) and adopting moves them back; the budget
(sessions, pages per pool) evicts the least recently used; a forgotten running session keeps
nothing; and the conductor's table (`wgc_runtime.core.conductor.sessions`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wgc_runtime.core.conductor.admission import parked_pages
from wgc_runtime.core.conductor.sessions import SessionTable
from wgc_runtime.core.executor.sessions import SessionBusy, SessionKey, Sessions
from wgc_runtime.engines.kv_pool import PagedKVPool
from wgc_runtime.engines.kv_pools import KvPools


def pool() -> PagedKVPool:
    return PagedKVPool(layers=1, kv_heads=1, head_dim=2, pages=16, page_size=4)


def turn(s: Sessions, p: PagedKVPool, session: str, request: str, tokens: int) -> dict:
    state = s.adopt(session, request)
    p.append(request, "main", tokens)
    s.park(session, request, {"LLM": {"ids": list(range(p.seq_len(request)))}})
    return state


def fake_pools(p: PagedKVPool) -> KvPools:
    """A stand-in for the rank's pools: `Sessions` reads only `.pools`."""
    return SimpleNamespace(pools={"LLM": p})  # pyright: ignore[reportReturnType]


def test_parking_and_adopting_move_the_pages_without_copying() -> None:
    p = pool()
    s = Sessions(fake_pools(p), max_sessions=2)
    assert turn(s, p, "chat", "r1", 6) == {}
    table = p.page_table(SessionKey("chat"))
    assert not p.has("r1") and len(table) == 2
    state = turn(s, p, "chat", "r2", 3)
    assert state == {"LLM": {"ids": list(range(6))}}
    assert p.page_table(SessionKey("chat"))[:2] == table and p.seq_len(SessionKey("chat")) == 9
    assert [(i.session, i.pages, i.active) for i in s.list()] == [("chat", 3, False)]
    assert s.list()[0].idle_s >= 0.0
    assert s.drop("chat") and p.used_pages == 0
    p.check()


def test_the_budget_evicts_the_least_recently_used() -> None:
    p = pool()
    s = Sessions(fake_pools(p), max_sessions=3, max_pages=4)
    turn(s, p, "a", "r1", 8)  # 2 pages
    turn(s, p, "b", "r2", 4)  # 1 page
    turn(s, p, "a", "r3", 1)  # a: 3 pages, now the most recent
    turn(s, p, "c", "r4", 4)  # 5 pages parked > 4: `b` goes first, then 4 fit
    assert [i.session for i in s.list()] == ["a", "c"] and s.evicted == 1
    turn(s, p, "d", "r5", 20)  # larger than the whole budget: dropped with the others
    assert s.list() == [] and p.used_pages == 0


def test_one_request_per_session_and_a_forgotten_running_session_keeps_nothing() -> None:
    p = pool()
    s = Sessions(fake_pools(p), max_sessions=1)
    s.adopt("chat", "r1")
    with pytest.raises(SessionBusy, match="has request `r1` running"):
        s.adopt("chat", "r2")
    with pytest.raises(SessionBusy, match="all 1 sessions"):
        s.adopt("other", "r3")
    p.append("r1", "main", 4)
    s.drop("chat")  # DELETE while it runs
    s.park("chat", "r1", {})
    assert s.list() == [] and p.has("r1")  # the request's own pages, freed at its release


def test_the_conductor_table_evicts_idle_sessions_and_refuses_when_all_run() -> None:
    t = SessionTable(max_sessions=2)
    assert t.begin("a", "r1", 0.0) == (None, [])
    assert t.begin("b", "r2", 1.0) == (None, [])
    why, evicted = t.begin("c", "r3", 2.0)
    assert why is not None and "all 2 sessions" in why and evicted == []
    assert t.end("r1", ok=True, now=3.0) is None
    assert t.begin("a", "r4", 4.0)[0] is None  # its next turn
    assert "has a request running" in (t.begin("a", "r5", 5.0)[0] or "")
    assert t.end("r2", ok=True, now=6.0) is None
    assert t.begin("c", "r6", 7.0) == (None, ["b"])  # the idle one goes
    assert t.end("r6", ok=False, now=8.0) == "c"  # a failed turn forgets its session
    assert [s for s, _, _ in t.listing(9.0)] == ["a"]
    assert t.drop("a") and not t.drop("a")


def test_the_pages_kept_for_idle_sessions_are_never_promised() -> None:
    assert parked_pages(0, 0, 100) == 0  # sessions off
    assert parked_pages(4, 0, 100) == 50  # default: half the pool
    assert parked_pages(4, 30, 100) == 30 and parked_pages(4, 300, 100) == 100
