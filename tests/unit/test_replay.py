"""A restart replays or fails a request as the plan says, per walk (issue 34, point 1): the
placement's ``on_restart:`` reaches `WalkSpec.on_restart`, `RankWatch.replays` answers per
(request, rank), and `ConductorCore.replay` runs a request again from its start under a new id,
sending again none of the outputs the client already has."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.cli.compile import sync
from wgc.driver import Driver
from wgc.show.plan_html import render_plan_html
from wgc.show.plan_text import render_plan_text
from wgc_runtime.contract.flow import SEED_OPTION
from wgc_runtime.contract.kinds import OnRestart
from wgc_runtime.contract.messages import (
    CLIENT,
    ClientOut,
    ExportState,
    Finished,
    Output,
    Release,
    StartWalk,
    Value,
    WalkDone,
)
from wgc_runtime.core.conductor.core import ConductorCore
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.processes.recovery import RankWatch

MODEL = """model two

node A: stateless {
  impl "m:A"
  in  x: f32[4]
  out y: f32[4]
}

node B: stateless {
  impl "m:B"
  in  y: f32[4]
  out z: f32[4]
}

walk first(x?: f32[4]) {
  A(x) -> y
  B(y) -> z
  emit z as tensor
}

walk second(x?: f32[4]) {
  B(y = x) -> z
  emit z as tensor
}

flow main { first() second() }
"""

PLACEMENT = """devices: [cpu, cpu]
place:
  - nodes: [A]
    ranks: [0]
  - nodes: [B]
    ranks: [1]
"""


def _plan(tmp_path: Path, on_restart: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    walk, placement = tmp_path / "two.walk", tmp_path / "p.yaml"
    walk.write_text(MODEL)
    placement.write_text(PLACEMENT + on_restart)
    result = Driver().plan(str(walk), str(placement))
    assert result.plan is not None, [d.message for d in result.diagnostics]
    return result.plan


def test_wgc_show_says_each_walks_policy(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "on_restart: {first: replay}\n")
    text = render_plan_text(plan)
    assert "  on_restart fail second; replay first\n" in text
    assert "  walks   first (replay)\n" in text  # rank 0 runs only `first`
    assert "  walks   first (replay), second\n" in text
    page = render_plan_html(plan)
    assert "<h2>On restart</h2>" in page
    assert '<td class="n">first</td><td class="n">0, 1</td><td class="v">replay</td>' in page
    assert '<td class="n">second</td><td class="n">1</td><td class="v">fail</td>' in page
    plain = render_plan_text(_plan(tmp_path / "plain", ""))
    assert "  on_restart fail (every walk: a request in flight on a dead rank fails)\n" in plain


def _spec(tmp_path: Path, on_restart: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    walk, placement = tmp_path / "two.walk", tmp_path / "p.yaml"
    walk.write_text(MODEL)
    placement.write_text(PLACEMENT + on_restart)
    result = Driver().compile(str(walk), str(placement))
    assert result.ok, [d.message for d in result.diagnostics]
    out = tmp_path / "gen"
    sync(out, result.files, check=False)
    return load_plan(out)[0]


def test_the_placement_sets_each_walks_policy(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "on_restart: {default: replay, second: fail}\n")
    assert {w.name: w.on_restart for w in spec.walks} == {
        "first": OnRestart.REPLAY,
        "second": OnRestart.FAIL,
    }
    plain = _spec(tmp_path / "plain", "")
    assert {w.on_restart for w in plain.walks} == {OnRestart.FAIL}
    every = _spec(tmp_path / "every", "on_restart: replay\n")
    assert {w.on_restart for w in every.walks} == {OnRestart.REPLAY}


def test_a_rank_replays_only_what_replaying_walks_left_there(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "on_restart: {first: replay}\n")
    watch = RankWatch(spec)
    watch.sent(0, StartWalk("r1", 0, "first", "main"))  # first: ranks 0 and 1
    watch.sent(1, StartWalk("r2", 0, "first", "main"))
    watch.sent(1, StartWalk("r2", 1, "second", "main"))  # second (fail): rank 1 only
    assert watch.on_rank_died(1, "rank 1 died", ["r1", "r2"]) == ["r1", "r2"]
    assert watch.replays("r1", 1) and watch.replays("r1", 0)
    assert not watch.replays("r2", 1) and watch.replays("r2", 0)
    assert not watch.replays("r3", 0)  # holds nothing: nothing to replay
    # a state move takes the request's own answer to where it goes
    watch.sent(0, ExportState("r2", 2, "B", (1,), (0,)))
    assert not watch.replays("r2", 0)


class _Out:
    def __init__(self) -> None:
        self.msgs: list[tuple[int, object]] = []

    def __call__(self, to: int, msg: object) -> None:
        self.msgs.append((to, msg))

    def take(self) -> list[tuple[int, object]]:
        out, self.msgs = self.msgs, []
        return out


def _core(tmp_path: Path) -> tuple[ConductorCore, _Out]:
    spec = _spec(tmp_path, "on_restart: replay\n")
    out = _Out()
    return ConductorCore(spec, out, max_concurrent_requests=1), out


def test_a_replayed_request_starts_again_first_in_line_under_its_new_id(tmp_path: Path) -> None:
    core, out = _core(tmp_path)
    request = core.spec.request([], ["tensor"])
    core.submit("r1", request)
    # `first` starts on its first value (a lazy walk: no `StartWalk`)
    started = [m for _, m in out.take() if isinstance(m, Value)]
    assert {m.request for m in started} == {"r1"}
    core.submit("r2", request)  # waits: one request at a time
    core.hold_admission(True)  # a rank is down
    assert core.replay("r1", "r1~1") is None
    msgs = out.take()
    released = sorted(to for to, m in msgs if isinstance(m, Release) and m.request == "r1")
    assert released == [0, 1]  # the old run ends on every rank
    assert not any(isinstance(m, Finished) for _, m in msgs)  # the client is told nothing
    assert core.running() == [] and core.queued() == ["r1~1", "r2"]
    core.deliver(WalkDone("r1", started[0].walk_id, "first", 0))  # late news of the old run
    core.hold_admission(False)  # the rank is back
    again = [m for _, m in out.take() if isinstance(m, Value)]
    assert again and {m.request for m in again} == {"r1~1"}
    # it computes what the old run would have: its nodes seed from the old id
    assert dict(again[0].options or ())[SEED_OPTION] == "r1"
    assert core.running() == ["r1~1"] and core.queued() == ["r2"]


def test_a_replay_sends_only_what_the_client_does_not_have(tmp_path: Path) -> None:
    core, out = _core(tmp_path)
    core.submit("r1", core.spec.request([], ["tensor"]))
    start = next(m for _, m in out.take() if isinstance(m, Value))
    core.deliver(ClientOut("r1", start.walk_id, "first", "main", "tensor", "z", (), b"x"))
    assert any(to == CLIENT for to, _ in out.take())
    assert core.replay("r1", "r1~1") is None  # replayed, though the client has an output
    again = next(m for _, m in out.take() if isinstance(m, Value))
    core.deliver(ClientOut("r1~1", again.walk_id, "first", "main", "tensor", "z", (), b"x"))
    assert not [m for to, m in out.take() if to == CLIENT]  # checked equal, not sent twice
    core.deliver(ClientOut("r1~1", again.walk_id, "first", "main", "tensor", "z", (1,), b"y"))
    assert [m.data for to, m in out.take() if to == CLIENT and isinstance(m, Output)] == [b"y"]


def test_a_replay_that_diverges_fails(tmp_path: Path) -> None:
    core, out = _core(tmp_path)
    core.submit("r1", core.spec.request([], ["tensor"]))
    start = next(m for _, m in out.take() if isinstance(m, Value))
    core.deliver(ClientOut("r1", start.walk_id, "first", "main", "tensor", "z", (), b"x"))
    assert core.replay("r1", "r1~1") is None
    again = next(m for _, m in out.take() if isinstance(m, Value))
    out.take()
    core.deliver(ClientOut("r1~1", again.walk_id, "first", "main", "tensor", "z", (), b"other"))
    (end,) = [m for to, m in out.take() if to == CLIENT]
    assert isinstance(end, Finished) and not end.ok and "diverged" in (end.message or "")


def test_the_editor_renames_a_walk_in_on_restart_too() -> None:
    from wgc.lsp.placement_refs import names_in

    text = "devices: [cpu]\non_restart: {default: replay, decode: fail}\n"
    assert [(n.kind, n.name, n.line, n.start) for n in names_in(text)] == [
        ("walk", "decode", 1, 30)
    ]


@pytest.mark.parametrize(
    ("on_restart", "code", "message"),
    [
        ("on_restart: sometimes\n", "WG817", "`sometimes` is not a valid `on_restart` policy"),
        ("on_restart: {first: again}\n", "WG817", "policy for `first`"),
        ("on_restart: {first: replay, first: fail}\n", "WG805", "`first` in `on_restart`"),
        ("on_restart: [first]\n", "WG803", "`on_restart` must be a mapping"),
        ("on_restart: {frist: replay}\n", "WG853", "`frist`, which is not a walk of `two`"),
    ],
)
def test_a_bad_on_restart_is_a_coded_error(tmp_path: Path, on_restart, code, message) -> None:
    walk, placement = tmp_path / "two.walk", tmp_path / "p.yaml"
    walk.write_text(MODEL)
    placement.write_text(PLACEMENT + on_restart)
    result = Driver().plan(str(walk), str(placement))
    assert result.plan is None
    assert [(d.code, message in d.message) for d in result.errors] == [(code, True)]
