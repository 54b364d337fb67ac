"""Direct outputs in one process (`LocalCluster(direct_out=True)`, the cores as worker processes
run them for a connected client): a loop's emits go from its rank to the client, the conductor
neither receives nor sends one, learns their number at the walk's end, and still hears from a
long stream often enough for its idle deadline."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

from wgc.cli.compile import sync
from wgc.driver import Driver
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.messages import CLIENT, CONDUCTOR, ClientOut, Emitted, Finished, Output
from wgc_runtime.core.executor import routing
from wgc_runtime.host.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "tests" / "e2e" / "faults"


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faults")
    result = Driver().compile(
        str(FAULTS / "faults.walk"), str(FAULTS / "placements" / "cpu-2rank.yaml")
    )
    assert result.ok, [d.message for d in result.errors]
    sync(out, result.files, check=False)
    return out


def _run(plan: Path, direct_out: bool, steps: int):
    local = LocalCluster(plan, direct_out=direct_out)
    sent: list = []  # what the conductor sends
    send = local.conductor.outbox

    def tapped(to: int, msg) -> None:
        sent.append(msg)
        send(to, msg)

    local.conductor.outbox = tapped
    local.log = []
    segs = [Segment("x", torch.zeros(4))]
    h = local.submit(local.request(segs, ["tensor"], {"steps": steps}), "req").result()
    assert h.ok, h.error
    received = [m for to, m in local.log if to == CONDUCTOR]
    return h, sent, received, local.log


def test_a_loop_s_outputs_skip_the_conductor(plan, monkeypatch) -> None:
    h, sent, received, log = _run(plan, True, 6)
    assert [o.meta["iters"] for o in h.outputs] == [(i,) for i in range(6)]
    assert not [m for m in received if isinstance(m, ClientOut | Output)]
    assert not [m for m in sent if isinstance(m, Output)]
    outs = [(to, m) for to, m in log if isinstance(m, Output)]
    assert len(outs) == 6 and all(to == CLIENT and m.counted for to, m in outs)
    (done,) = [m for m in sent if isinstance(m, Finished)]
    assert done.ok and done.outputs == 6
    # what the conductor hears does not grow with the loop
    longer = _run(plan, True, 60)[2]
    assert collections.Counter(map(type, longer)) == collections.Counter(map(type, received))


def test_through_the_conductor_every_output_is_relayed(plan) -> None:
    h, sent, received, _ = _run(plan, False, 6)
    assert len(h.outputs) == 6
    assert sum(isinstance(m, ClientOut) for m in received) == 6
    assert sum(isinstance(m, Output) for m in sent) == 6


def test_a_long_stream_still_tells_the_conductor_it_moves(plan, monkeypatch) -> None:
    monkeypatch.setattr(routing, "PROGRESS_S", 0.0)  # every emit: as if each took a second
    h, _, received, _ = _run(plan, True, 6)
    assert len(h.outputs) == 6
    beats = [m for m in received if isinstance(m, Emitted)]
    assert len(beats) == 6 and all(m.count == 0 for m in beats)
