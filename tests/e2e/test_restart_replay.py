"""A restart replays or fails a request as the placement's ``on_restart:`` says (issue 34,
point 1): a request in flight on a walk that replays runs again from its start once the killed
rank is back, and its output equals the uninterrupted run's; on a walk that fails, it fails
at once with the rank named.

The model (written here) runs the failure-test nodes (`tests.e2e.faults.nodes`: a source on
rank 0, a kv-cache loop on rank 1) in two walks that differ only in their policy; a walk emits
once, after its loop, so nothing reaches the client before the kill."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from tests.e2e.runtime_support import compile_model, start, stop
from wgc_runtime.host.client import Client, RequestFailed

MODEL = """model restarts

option steps: int = 3
option delay_ms: int = 0
option quiet: bool = true

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

walk replayed(x: f32[4]) {
  source(x) -> y
  loop steps_loop max 1000 until stop {
    step(y) -> y, stop
  } yield last y
  emit y as tensor
}

walk failed(x: f32[4]) {
  source(x) -> y
  loop steps_loop max 1000 until stop {
    step(y) -> y, stop
  } yield last y
  emit y as tensor
}

flow run {
  for seg in request.inputs {
    if option.quiet { replayed(x = seg) } else { failed(x = seg) }
  }
}
"""

PLACEMENT = """devices: [cpu, cpu]
place:
  - nodes: [source]
    ranks: [0]
  - nodes: [step]
    ranks: [1]
max_concurrent_requests: 2
on_restart: {replayed: replay, failed: fail}
"""

X = [("x", torch.arange(4, dtype=torch.float32))]
SLOW = {"steps": 60, "delay_ms": 50}  # three seconds on rank 1, with nothing emitted


def _back(cluster, t0: float) -> None:
    while time.monotonic() - t0 < 120 and cluster.health().status != "ok":
        time.sleep(0.05)
    assert cluster.health().status == "ok"


@pytest.mark.slow
def test_a_replay_walk_finishes_after_a_restart_and_a_fail_walk_fails_at_once(
    tmp_path: Path,
) -> None:
    walk = tmp_path / "restarts.walk"
    walk.write_text(MODEL)
    cluster = start(compile_model(walk, tmp_path / "out", PLACEMENT), restarts=2)
    try:
        assert cluster.client_address is not None
        with Client(cluster.client_address, idle_timeout=120) as client:
            (plain,) = client.run(X, ["tensor"], {"steps": 60}, deadline=60)
            assert (
                plain.value is not None
                and plain.value.tolist() == ((torch.arange(4.0) + 1) * 2**60).tolist()
            )

            # replay: the request rank 1 held runs again once rank 1 is back
            replayed = client.submit(X, ["tensor"], SLOW, deadline=180)
            time.sleep(1.0)  # it is in its loop on rank 1
            t0 = time.monotonic()
            cluster.kill("rank 1")
            (out,) = replayed.collect()
            assert time.monotonic() - t0 > 1.0  # not the first run, which was a second from done
            assert len(cluster.restart_times) == 1
            assert out.value is not None and torch.equal(
                out.value, plain.value
            )  # what the lost run would have sent
            _back(cluster, t0)

            # fail: the request fails at once, with the rank and the policy named
            failed = client.submit(X, ["tensor"], {**SLOW, "quiet": False}, deadline=180)
            time.sleep(1.0)
            t0 = time.monotonic()
            cluster.kill("rank 1")
            with pytest.raises(RequestFailed) as info:
                failed.collect()
            took = time.monotonic() - t0
            assert info.value.error.kind == "internal"
            message = info.value.error.message
            assert "rank 1 died (killed by SIGKILL)" in message and "on_restart" in message
            assert took < 1.0, f"failed {took:.2f} s after the kill"
            _back(cluster, t0)
            assert cluster.failure is None and len(cluster.restart_times) == 2
            print(f"\nfail: {took * 1000:.0f} ms after the kill")
    finally:
        stop(cluster)
