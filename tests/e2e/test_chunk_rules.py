"""Standing rules (issue 29, point 1): an ``on`` flow that only runs one walk per chunk, a walk on
the stream's owner alone, is run by the owner rank chunk by chunk without the conductor
(`StreamSpec.chunk_walk`, `wgc_runtime.core.executor.chunks`): no `ChunkReady`, `StartWalk`,
`SkipChunk` or `WalkDone` per chunk, one `ChunksDone` at the end. The outputs are those of the
same flow run by the conductor (a flow that branches keeps the conductor's path); a failure, a
cancel or a stream with no chunk at all end the request as before and leave nothing on a rank.
Counted on `LocalCluster` (one thread) with the no-op tts model (`benchmarks/models`)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

from wgc.driver import Driver
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.messages import (
    CLIENT,
    CONDUCTOR,
    ChunksDone,
    ClientOut,
    Emitted,
    Output,
)
from wgc_runtime.host.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "benchmarks" / "models"
PLAIN = "flow codec on tokens {\n  vocode()\n}"
# the same walk per chunk, behind a condition on a request option: the conductor's path
BRANCHING = "flow codec on tokens {\n  if option.eos_after > 0 {\n    vocode()\n  }\n}"
TEXT = [Segment("text", "hello there")]


def _compile(tmp_path: Path, flow: str, placement: str = "tts-2rank.yaml"):
    source = (MODELS / "tts.walk").read_text()
    assert PLAIN in source
    tmp_path.mkdir(parents=True, exist_ok=True)
    walk = tmp_path / "tts.walk"
    walk.write_text(source.replace(PLAIN, flow))
    result = Driver().compile(str(walk), str(MODELS / "placements" / placement))
    assert result.ok, [d.message for d in result.errors]
    out = tmp_path / "out"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text)
    return out


def _run(folder: Path | LocalCluster, eos_after: int = 34):
    local = folder if isinstance(folder, LocalCluster) else LocalCluster(folder)
    local.log = []
    h = local.submit(local.request(TEXT, ["audio"], {"eos_after": eos_after})).result()
    for ex in local.ranks.values():
        assert ex.requests == {}, f"rank {ex.rank} kept the request"
    return local, h, local.log


def _conductor_traffic(log) -> collections.Counter:
    """The messages to and from the conductor but the client's outputs (`ClientOut` in,
    `Output` out, or a routed request's `Emitted` count: one per emitted frame either way)."""
    return collections.Counter(
        type(m).__name__
        for to, m in log
        if (to in (CONDUCTOR, CLIENT) or type(m).__name__ in {"StartWalk", "SkipChunk"})
        and not isinstance(m, ClientOut | Output | Emitted)
    )


@pytest.mark.parametrize("placement", ["tts-2rank.yaml", "tts-1rank.yaml"])
def test_a_plain_on_flow_is_a_standing_rule_and_a_branching_one_is_not(tmp_path, placement):
    plain = LocalCluster(_compile(tmp_path / "a", PLAIN, placement)).spec
    branching = LocalCluster(_compile(tmp_path / "b", BRANCHING, placement)).spec
    (s,) = plain.streams
    assert (s.chunk_walk, s.chunk_flow) == ("vocode", "codec")
    assert s.owner == plain.walk("vocode").ranks[0]  # type: ignore[union-attr]
    assert not branching.streams[0].chunk_walk


def test_a_placed_test_is_folded_and_is_no_branch(tmp_path) -> None:
    placed = "flow codec on tokens {\n  if placed(vocoder) {\n    vocode()\n  }\n}"
    (s,) = LocalCluster(_compile(tmp_path, placed)).spec.streams
    assert (s.chunk_walk, s.chunk_flow) == ("vocode", "codec")


def test_the_owner_runs_every_chunk_and_the_outputs_are_the_conductors(tmp_path) -> None:
    _, ruled, log = _run(_compile(tmp_path / "a", PLAIN))
    _, led, led_log = _run(_compile(tmp_path / "b", BRANCHING))
    assert ruled.ok and led.ok
    frames = [o.tensor for o in ruled.outputs]
    assert len(frames) == (35 - 28) // 7 + 1 and len(frames) == len(led.outputs)
    for mine, theirs in zip(frames, (o.tensor for o in led.outputs), strict=True):
        assert torch.equal(mine, theirs)
    assert [o.meta["flow"] for o in ruled.outputs] == ["codec"] * len(frames)
    # the conductor's own traffic does not grow with the chunks: one `ChunksDone` for all
    traffic = _conductor_traffic(log)
    assert not traffic["ChunkReady"] and not traffic["SkipChunk"], traffic
    (done,) = (m for _, m in log if isinstance(m, ChunksDone))
    assert (done.walks, done.skipped) == (len(frames), 1)  # the final chunk is empty
    led_traffic = _conductor_traffic(led_log)
    assert led_traffic["ChunkReady"] == len(frames) + 1
    assert sum(traffic.values()) == sum(led_traffic.values()) - 3 * len(frames) - 2 + 1


def test_a_longer_request_costs_the_conductor_no_more_messages(tmp_path) -> None:
    folder = _compile(tmp_path, PLAIN)
    short = _conductor_traffic(_run(folder, 34)[2])
    long = _conductor_traffic(_run(folder, 34 + 7 * 20)[2])
    assert short == long, (short, long)


def test_a_stream_with_no_chunk_ends_the_flow(tmp_path) -> None:
    _, h, log = _run(_compile(tmp_path, PLAIN), eos_after=3)  # fewer tokens than a window
    assert h.ok and h.outputs == []
    (done,) = (m for _, m in log if isinstance(m, ChunksDone))
    assert (done.walks, done.skipped) == (0, 1)


def test_a_failing_chunk_walk_fails_the_request_and_leaves_nothing(tmp_path, monkeypatch):
    calls = []

    def forward_one(self, inputs, ctx):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("vocoder broke")
        return {"audio": inputs["window"].float().mean().repeat(4)}

    local = LocalCluster(_compile(tmp_path, PLAIN))
    monkeypatch.setattr(type(local.ranks[1].nodes["vocoder"]), "forward_one", forward_one)
    local, h, log = _run(local, eos_after=34 + 7 * 3)
    assert not h.ok and h.error is not None and h.error.kind == "node"
    assert h.error.flow == "codec" and h.error.walk == "vocode"
    assert not any(isinstance(m, ChunksDone) for _, m in log)
    # the next request runs as usual
    again = local.submit(local.request(TEXT, ["audio"], {"eos_after": 34})).result()
    assert again.ok and len(again.outputs) == 2


def test_a_cancel_mid_stream_leaves_nothing(tmp_path) -> None:
    local = LocalCluster(_compile(tmp_path, PLAIN))
    h = local.submit(local.request(TEXT, ["audio"], {"eos_after": 34 + 7 * 10}))
    while not h.outputs:  # until the first frame reached the client
        assert local.step()
    h.cancel()
    local.run()
    assert not h.ok and h.error is not None and h.error.kind == "cancelled"
    for ex in local.ranks.values():
        assert ex.requests == {}, f"rank {ex.rank} kept the cancelled request"
