"""Messages per request (issue 9): the control messages a walk costs are the ones its plan says
(`wgc.lower.control`: `StartWalk` only to ranks that do not start on their first value,
`WalkDone` only from `WalkSpec.report`, `Release` only to ranks that hold something), counted
on `LocalCluster`'s log for the benchmark models (`benchmarks/models`): chain3 on 3 ranks (one
message per data hop, goal ≤ 6), hop10 on 2, and tts on 2 ranks (an LM streaming to a vocoder:
every piece keeps its control messages, but the vocoder's chunk walks, which its owner rank
starts itself under the stream's standing rule: no conductor message per chunk, one
`ChunksDone`). A cancelled or late value never leaves state behind on
a rank that starts on its first value or drops a request itself."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest
import torch

from wgc.driver import Driver
from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.messages import (
    CLIENT,
    Finished,
    Output,
    Release,
    StartWalk,
    Value,
    WalkDone,
)
from wgc_runtime.core.conductor.stats import ConductorStats
from wgc_runtime.host.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "benchmarks" / "models"


def _cluster(tmp_path: Path, walk: str, placement: str, direct_out: bool = True) -> LocalCluster:
    result = Driver().compile(str(MODELS / walk), str(MODELS / "placements" / placement))
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp_path / name).write_text(text)
    return LocalCluster(tmp_path, direct_out=direct_out)


def _logged(local: LocalCluster, inputs, want) -> list:
    segs = [Segment(m, v) for m, v in inputs]
    assert local.submit(local.request(segs, want)).result().ok  # warm
    local.log = []
    assert local.submit(local.request(segs, want)).result().ok
    log, local.log = local.log, None
    return log


def _expected_control(spec: ConductorSpec, log: list) -> dict[str, int]:
    """The control messages the plan implies for the walk instances the log shows."""
    instances: dict[int, str] = {}
    for _, m in log:
        if hasattr(m, "walk_id") and getattr(m, "walk", None):
            instances[m.walk_id] = m.walk
    starts = dones = 0
    holds = {s.owner for s in spec.streams}
    for wid, name in instances.items():
        if wid < 0:  # started by a stream's owner rank (a standing rule): no control message
            continue
        ws = spec.walk(name)
        assert ws is not None
        starts += len([r for r in ws.ranks if r not in ws.lazy])
        dones += len(ws.report)
        holds |= {r for r in ws.ranks if r not in ws.no_release}
    return {"StartWalk": starts, "WalkDone": dones, "Release": len(holds)}


def _control(counts: collections.Counter) -> dict[str, int]:
    return {k: counts.get(k, 0) for k in ("StartWalk", "WalkDone", "Release")}


X = [("x", torch.zeros(4))]


@pytest.mark.parametrize(
    ("walk", "placement", "inputs", "want", "total"),
    [
        ("chain3.walk", "chain3-3rank.yaml", X, ["tensor"], 6),
        ("hop10.walk", "hop10-2rank.yaml", X, ["tensor"], 13),
        # the audio's two chunk outputs go from the vocoder rank to the client: no `ClientOut`
        ("tts.walk", "tts-2rank.yaml", [("text", "hello there")], ["audio"], 84),
    ],
)
def test_messages_per_request_are_the_plans(tmp_path, walk, placement, inputs, want, total):
    local = _cluster(tmp_path, walk, placement)
    log = _logged(local, inputs, want)
    counts = collections.Counter(type(m).__name__ for _, m in log)
    assert _control(counts) == _expected_control(local.spec, log), counts
    assert sum(counts.values()) == total, counts
    # a stream's chunks cost the conductor nothing: one `ChunksDone` per ruled stream
    assert not counts["ChunkReady"] and not counts["SkipChunk"], counts
    assert counts["ChunksDone"] == sum(1 for s in local.spec.streams if s.chunk_walk), counts
    for ex in local.ranks.values():
        assert ex.requests == {}, f"rank {ex.rank} kept a request"


@pytest.mark.parametrize("direct_out", [True, False])
def test_chain3_costs_one_message_per_data_hop(tmp_path, direct_out) -> None:
    local = _cluster(tmp_path, "chain3.walk", "chain3-3rank.yaml", direct_out)
    ws = local.spec.walk("chain")
    assert ws is not None
    assert ws.lazy == (0, 1, 2) and ws.report == () and ws.no_release == (0, 1, 2)
    assert ws.done_emits == 1
    # the conductor's tap (`/metrics`) times the walk from its first header value to its emit
    stats = ConductorStats(local.spec, time.monotonic)
    send, deliver = local.conductor.outbox, local.conductor.deliver

    def tapped_send(to: int, msg) -> None:
        stats.sent(msg)
        send(to, msg)

    def tapped_deliver(msg) -> None:
        stats.received(msg)
        deliver(msg)

    local.conductor.outbox, local.conductor.deliver = tapped_send, tapped_deliver
    log = _logged(local, X, ["tensor"])
    counts = collections.Counter(type(m).__name__ for _, m in log)
    if direct_out:  # rank 2 sends the output to the client, and the conductor only its count
        assert counts == {"Value": 3, "Emitted": 1, "Output": 1, "Finished": 1}
        (out,) = [(to, m) for to, m in log if isinstance(m, Output)]
        assert out[1].counted and out[0] == CLIENT
        (done,) = [m for _, m in log if isinstance(m, Finished)]
        assert done.outputs == 1
    else:  # through the conductor
        assert counts == {"Value": 3, "ClientOut": 1, "Output": 1, "Finished": 1}
    # the first value to each rank carries the walk's header (flow and options)
    assert all(m.options is not None and m.flow == "main" for _, m in log if isinstance(m, Value))
    assert stats.walks["chain"].n == 2 and stats.outcomes == {"ok": 2}


def test_a_traced_request_shows_its_ruled_chunk_walk_once(tmp_path) -> None:
    # the playground lights the walks a traced request ran; a stream's standing rule runs its
    # chunk walks on the owner rank (no StartWalk / WalkDone here): they show as one walk, from
    # the first of their emits to the stream's `ChunksDone` (a traced request's outputs come
    # through the conductor: the process never routes one, `ConductorLoop._submit`)
    local = _cluster(tmp_path, "tts.walk", "tts-2rank.yaml", direct_out=False)
    ruled = [(s.chunk_flow, s.chunk_walk) for s in local.spec.streams if s.chunk_walk]
    assert ruled
    clock = iter(range(10_000))
    stats = ConductorStats(local.spec, lambda: float(next(clock)))
    send, deliver = local.conductor.outbox, local.conductor.deliver

    def tapped_send(to: int, msg) -> None:
        stats.sent(msg)
        send(to, msg)

    def tapped_deliver(msg) -> None:
        stats.received(msg)
        deliver(msg)

    local.conductor.outbox, local.conductor.deliver = tapped_send, tapped_deliver
    h = local.submit(local.request([Segment("text", "hello there")], ["audio"]))
    stats.traced.add(h.id)
    local.run()
    assert h.ok
    events = stats.take_events()
    for flow, walk in ruled:
        mine = [e for e in events if e.walk == walk]
        assert [(e.flow, e.done) for e in mine] == [(flow, False), (flow, True)], events
        assert mine[1].seconds > 0  # from its first emit to the stream's end
    ran = {e.walk for e in events if e.done}
    assert ran == {w.name for w in local.spec.walks}, ran  # every walk of the request, once


def test_a_cancel_or_a_late_value_leaves_nothing_on_a_lazy_rank(tmp_path) -> None:
    local = _cluster(tmp_path, "chain3.walk", "chain3-3rank.yaml")
    segs = [Segment("x", torch.zeros(4))]
    local.log = []
    h = local.submit(local.request(segs, ["tensor"]))
    to, first = local.queue.popleft()  # the conductor's value for rank 0
    assert to == 0 and isinstance(first, Value)
    local.ranks[0].deliver(first)  # a plain piece: its generated code runs the call at once
    local.ranks[0].step()  # (the generic executor runs it here)
    # rank 0 ran its call: the value for rank 1 is on its way
    hop = next(m for to, m in local.log if to == 1 and isinstance(m, Value))
    local.cancel(h.id)
    local.run()
    assert not h.ok and h.error is not None and h.error.kind == "cancelled"
    released = {to for to, m in local.log if isinstance(m, Release)}
    assert released == {0, 1, 2}  # a failed or cancelled request releases every rank
    local.ranks[1].deliver(hop)  # the value again, after the cancel
    local.ranks[1].step()
    for ex in local.ranks.values():
        assert ex.requests == {}, f"rank {ex.rank} kept the cancelled request"

    # a finished request: no `Release` came, and a late copy of a value is dropped
    local.log = []
    done = local.submit(local.request(segs, ["tensor"])).result()
    assert done.ok
    late = next(m for to, m in local.log if to == 2 and isinstance(m, Value))
    assert not any(isinstance(m, Release | StartWalk | WalkDone) for _, m in local.log)
    local.log = []
    local.ranks[2].deliver(late)
    while local.step():
        pass
    assert local.log == [] and local.ranks[2].requests == {}
