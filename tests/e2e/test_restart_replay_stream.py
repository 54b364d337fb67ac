"""A replay after a restart of a request whose outputs were already streaming (issue 34, point
1): the replayed run checks the outputs the client already has against its own and sends only
the rest, so the client receives exactly the uninterrupted run's outputs, none twice.

The model (written here) runs the failure-test nodes (`tests.e2e.faults.nodes`: a source on
rank 0, a kv-cache loop on rank 1) in a walk that emits at every iteration of its loop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from tests.e2e.runtime_support import compile_model, start, stop
from wgc_runtime.host.client import Client

MODEL = """model streamed

option steps: int = 3
option delay_ms: int = 0

node source: stateless {
  impl "tests.e2e.faults.nodes:Source"
  in  x: f32[4]
  out y: f32[4]
}

node step: kv_cache {
  impl "tests.e2e.faults.nodes:Step"
  in  y:    f32[4]
  out y:    f32[4]
  out stop: bool[]
  config layers = 1
  config kv_heads = 1
  config head_dim = 4
  config kv_tokens = 1024
}

walk streamed(x: f32[4]) {
  source(x) -> y
  loop steps_loop max 1000 until stop {
    step(y) -> y, stop
    emit y as tensor
  }
}

flow run {
  for seg in request.inputs {
    streamed(x = seg)
  }
}
"""

# the loop's piece on rank 1 replays; the source's piece on rank 0 fails
PLACEMENT = """devices: [cpu, cpu]
place:
  - nodes: [source]
    ranks: [0]
  - nodes: [step]
    ranks: [1]
on_restart: {streamed: {default: fail, rank 1: replay}}
"""

X = [("x", torch.arange(4, dtype=torch.float32))]


@pytest.mark.slow
def test_a_replay_mid_stream_sends_the_client_exactly_the_uninterrupted_outputs(
    tmp_path: Path,
) -> None:
    walk = tmp_path / "streamed.walk"
    walk.write_text(MODEL)
    cluster = start(compile_model(walk, tmp_path / "out", PLACEMENT), restarts=2)
    try:
        assert cluster.client_address is not None
        with Client(cluster.client_address, idle_timeout=120) as client:
            plain = client.run(X, ["tensor"], {"steps": 40}, deadline=60)
            assert len(plain) == 40

            stream = client.submit(X, ["tensor"], {"steps": 40, "delay_ms": 40}, deadline=180)
            got = []
            for out in stream:  # a quarter of the way: 10 outputs are with the client
                got.append(out)
                if len(got) == 10:
                    break
            t0 = time.monotonic()
            cluster.kill("rank 1")
            got += stream.collect()
            took = time.monotonic() - t0
            assert len(cluster.restart_times) == 1  # it ran again, after the restart
            assert [o.iteration for o in got] == [o.iteration for o in plain]  # none twice
            for a, b in zip(got, plain, strict=True):
                assert a.value is not None and b.value is not None
                assert torch.equal(a.value, b.value)
            print(f"\nreplayed mid-stream: the rest came {took:.2f} s after the kill")
    finally:
        stop(cluster)
