"""Who holds what when a rank dies (issue 34, point 1): a request is held by every rank its
walks may leave state on, the consumer rank of the streams they feed included."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from wgc.cli.compile import sync
from wgc.driver import Driver
from wgc_runtime.contract.kinds import OnRestart
from wgc_runtime.contract.messages import StartWalk
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.processes.recovery import RankWatch, reach

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, family: str, placement: str):
    result = Driver().compile(
        str(ROOT / "wgc_models" / family / f"{family}.walk"),
        str(ROOT / "wgc_models" / family / "placements" / f"{placement}.yaml"),
    )
    assert result.ok
    sync(tmp_path, result.files, check=False)
    return load_plan(tmp_path)[0]


@pytest.mark.parametrize("placement", ["cpu-2rank", "cpu-3rank"])
def test_a_request_that_only_prefilled_is_held_by_the_stream_consumer(tmp_path, placement):
    # Orpheus: the LLM (rank 0) pushes tokens into the stream SNAC's rank owns; before the
    # codec flow starts the conductor sends that rank nothing for the request
    spec = _spec(tmp_path, "orpheus", placement)
    (stream,) = spec.streams
    assert stream.owner not in {w.name: w for w in spec.walks}["prefill"].ranks
    watch = RankWatch(spec)
    watch.sent(0, StartWalk("r1", 0, "prefill", "speech"))
    watch.sent(0, StartWalk("r2", 0, "prefill", "speech"))
    watch.ended("r2")
    held = watch.on_rank_died(stream.owner, "rank died", ["r1", "r2", "r3"])
    assert held == ["r1"]  # r2 ended, r3 never ran anything
    assert stream.owner in reach(spec, {w.name: w for w in spec.walks}["decode"])


def test_a_state_move_marks_and_is_blocked_by_its_destination(tmp_path) -> None:
    from wgc_runtime.contract.messages import ExportState

    spec = _spec(tmp_path, "bagel", "cpu-2rank")
    watch = RankWatch(spec)
    move = ExportState("r1", 3, "LLM_cfg_img", (0,), (1,))
    assert watch.blocked(0, move) is None
    watch.sent(0, move)  # rank 0 exports the request's state to rank 1
    assert watch.on_rank_died(1, "rank 1 died", ["r1"]) == ["r1"]
    assert watch.blocked(0, move) == 1 and watch.blocked(1, StartWalk("r2", 0, "x", "f")) == 1
    assert watch.up(1) and watch.blocked(0, move) is None


def test_a_walk_feeding_a_ruled_stream_replays_only_if_its_chunk_walk_does(tmp_path) -> None:
    # Orpheus's owner rank starts the codec flow's `snac_chunk` walks itself (a standing rule):
    # the conductor sends it no `StartWalk` for them, so the feeding walks carry their choice
    spec = _spec(tmp_path, "orpheus", "cpu-2rank")
    (stream,) = spec.streams
    assert stream.chunk_walk == "snac_chunk"

    def on_restart(chunk: OnRestart) -> bool:
        walks = tuple(
            dataclasses.replace(w, on_restart=chunk if w.name == "snac_chunk" else OnRestart.REPLAY)
            for w in spec.walks
        )
        watch = RankWatch(dataclasses.replace(spec, walks=walks))
        watch.sent(0, StartWalk("r1", 0, "decode", "speech"))
        return watch.replays("r1", stream.owner)

    assert on_restart(OnRestart.REPLAY)
    assert not on_restart(OnRestart.FAIL)


def test_qwen3_omni_three_ranks_a_prefilling_request_is_held_by_every_rank(tmp_path) -> None:
    # the kill matrix's hang (issue 34): requests in `prefill_reply` outlived rank 1's death.
    # The Thinker (rank 0) feeds the Talker's streams (rank 1), which feeds Code2Wav's (rank 2):
    # a request the conductor sent only its first walk is held by all three
    spec = _spec(tmp_path, "qwen3_omni", "cpu-3rank")
    watch = RankWatch(spec)
    watch.sent(0, StartWalk("r1", 0, "prefill_text", "thinker"))
    assert all(watch.on_rank_died(r, f"rank {r} died", ["r1"]) == ["r1"] for r in (0, 1, 2))


def test_a_stalled_request_says_which_deaths_it_outlived(tmp_path) -> None:
    spec = _spec(tmp_path, "qwen3_omni", "cpu-3rank")
    watch = RankWatch(spec)
    assert watch.notes("r1") == ["no rank died while it ran, as far as the conductor knows"]
    watch.sent(0, StartWalk("r1", 0, "prefill_text", "thinker"))
    assert watch.on_rank_died(1, "killed by SIGKILL", ["r1", "r2"]) == ["r1"]
    assert watch.notes("r2") == [
        "rank 1 is down (killed by SIGKILL)",
        "rank 1 died while it ran (killed by SIGKILL) and it went on: the conductor had sent "
        "it nothing that reaches rank 1",
    ]
    assert watch.up(1)
    assert watch.notes("r2")[0].startswith("rank 1 died while it ran")
    watch.ended("r2")
    assert watch.notes("r2") == ["no rank died while it ran, as far as the conductor knows"]
