"""`PeerGuard`: bad frames counted per peer, one line per peer per minute, a peer past the limit
cut off for a while, a bounded number of peers remembered and shown."""

from __future__ import annotations

from wgc_runtime.host.transport.guard import PeerGuard


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def guard(**kw) -> tuple[PeerGuard, list[str], Clock]:
    lines: list[str] = []
    clock = Clock()
    return PeerGuard("rank 1", log=lines.append, clock=clock, **kw), lines, clock


def test_one_line_per_peer_per_minute_with_the_count_since() -> None:
    g, lines, clock = guard()
    for _ in range(5):
        g.bad("p", "junk")
    assert lines == ["wgc: rank 1 dropped a frame from p: junk"]
    clock.t += 61
    g.bad("p", "junk")
    assert (
        lines[-1] == "wgc: rank 1 dropped a frame from p: junk (4 more from it since the last line)"
    )
    assert g.dropped == 6 and g.sent_by("p") == 6 and g.wary()
    clock.t += 61
    assert not g.wary()


def test_a_peer_past_the_limit_is_cut_off_for_a_while() -> None:
    g, lines, clock = guard(limit=10, ban_s=100)
    cuts = [g.bad("p", "junk") for _ in range(12)]
    assert cuts.count(True) == 1 and cuts.index(True) == 9
    assert g.is_cut("p") and not g.is_cut("q") and g.cut_offs == 1
    assert lines[-1] == "wgc: rank 1 cut off p after 10 bad frames within 60 s (for 100 s)"
    clock.t += 101
    assert not g.is_cut("p")


def test_a_trusted_peer_is_never_cut_off() -> None:
    g, _, _ = guard(limit=3)
    assert not any(g.bad("deployment", "bad batch", may_cut=False) for _ in range(50))
    assert not g.is_cut("deployment")


def test_many_names_get_few_lines_and_bounded_memory() -> None:
    g, lines, clock = guard(peer_lines=3, max_peers=8)
    for i in range(20):
        g.bad(f"p{i}", "junk")
    assert len(lines) == 3
    clock.t += 61
    g.bad("p0", "junk")
    assert "also dropped 17 frames from 17 other peers" in lines[3]
    assert len(g._peers) <= 8 and g.dropped == 21
