"""The restart policy per piece (issue 34, point 1): ``on_restart: {walk: {RANK: policy}}``
gives one walk's piece on one rank a policy of its own; it reaches `WalkSpec.piece_restarts`
(`WalkSpec.restart_on`), `wgc show` says which piece replays, and `RankWatch` replays a request
only where the dead rank's pieces say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_replay import MODEL, PLACEMENT, _plan, _spec
from wgc.driver import Driver
from wgc.show.plan_html import render_plan_html
from wgc.show.plan_text import render_plan_text
from wgc_runtime.contract.kinds import OnRestart
from wgc_runtime.contract.messages import StartWalk
from wgc_runtime.host.processes.recovery import RankWatch

# `first` runs A on rank 0 and B on rank 1; `second` runs B on rank 1
PIECES = "on_restart: {first: {default: fail, rank 1: replay}}\n"


def test_a_pieces_policy_reaches_the_plan(tmp_path: Path) -> None:
    spec = _spec(tmp_path, PIECES)
    first = next(w for w in spec.walks if w.name == "first")
    assert first.on_restart is OnRestart.FAIL
    assert first.piece_restarts == ((1, OnRestart.REPLAY),)
    assert [first.restart_on(r) for r in (0, 1)] == [OnRestart.FAIL, OnRestart.REPLAY]
    second = next(w for w in spec.walks if w.name == "second")
    assert second.restart_on(1) is OnRestart.FAIL and second.piece_restarts == ()
    # a walk's own default under a file default: its unnamed pieces take the file's
    other = _spec(tmp_path / "other", "on_restart: {default: replay, first: {0: fail}}\n")
    first = next(w for w in other.walks if w.name == "first")
    assert [first.restart_on(r) for r in (0, 1)] == [OnRestart.FAIL, OnRestart.REPLAY]


def test_wgc_show_says_which_piece_replays(tmp_path: Path) -> None:
    plan = _plan(tmp_path, PIECES)
    text = render_plan_text(plan)
    assert "  on_restart fail first (rank 0), second; replay first (rank 1)\n" in text
    assert "  walks   first\n" in text  # rank 0: its piece of `first` fails
    assert "  walks   first (replay), second\n" in text  # rank 1
    page = render_plan_html(plan)
    assert '<td class="n">first</td><td class="n">0</td><td class="v">fail</td>' in page
    assert '<td class="n">first</td><td class="n">1</td><td class="v">replay</td>' in page
    assert '<td class="n">second</td><td class="n">1</td><td class="v">fail</td>' in page


def test_a_request_replays_where_the_dead_ranks_pieces_say_so(tmp_path: Path) -> None:
    watch = RankWatch(_spec(tmp_path, PIECES))
    watch.sent(0, StartWalk("r1", 0, "first", "main"))  # state on ranks 0 and 1
    assert watch.replays("r1", 1) and not watch.replays("r1", 0)
    watch.sent(1, StartWalk("r2", 0, "first", "main"))
    watch.sent(1, StartWalk("r2", 1, "second", "main"))  # second's piece on rank 1 fails
    assert not watch.replays("r2", 1)


@pytest.mark.parametrize(
    ("on_restart", "code", "message"),
    [
        ("on_restart: {second: {0: replay}}\n", "WG898", "rank 0 for `second`"),
        ("on_restart: {first: {rank 7: replay}}\n", "WG898", "rank 7 for `first`"),
        ("on_restart: {first: {A: replay}}\n", "WG899", "`A` in `on_restart` for `first`"),
        ("on_restart: {first: {rank one: replay}}\n", "WG899", "names no piece"),
        ("on_restart: {first: {1: replay, rank 1: fail}}\n", "WG805", "for `first`"),
        ("on_restart: {first: {1: again}}\n", "WG817", "policy for `first`"),
        ("on_restart: {frist: {1: replay}}\n", "WG853", "`frist`, which is not a walk"),
    ],
)
def test_a_bad_piece_is_a_coded_error(tmp_path: Path, on_restart, code, message) -> None:
    walk, placement = tmp_path / "two.walk", tmp_path / "p.yaml"
    walk.write_text(MODEL)
    placement.write_text(PLACEMENT + on_restart)
    result = Driver().plan(str(walk), str(placement))
    assert result.plan is None
    assert [(d.code, message in d.message) for d in result.errors] == [(code, True)]


def test_an_outputs_digest_tells_values_apart() -> None:
    import torch

    from wgc_runtime.core.conductor.replay import digest

    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert digest(a) == digest(a.clone()) == digest(a.t().contiguous().t())
    assert digest(a) != digest(a + 1) and digest(a) != digest(a.to(torch.float64))
    assert digest(a) != digest(a.reshape(3, 2))
    assert digest(a.to(torch.bfloat16)) == digest(a.to(torch.bfloat16))
    assert digest({"text": "hi", "ids": [1, 2]}) != digest({"text": "hi", "ids": [1, 3]})
