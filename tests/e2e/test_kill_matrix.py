"""A seeded corner of the kill matrix (`benchmarks/kill_matrix.py`, issue 34 point 1): on
Orpheus over two ranks (the LLM on rank 0, the SNAC stream consumer on rank 1), SIGKILL of the
consumer while prompts prefill (its stream buffers requests the conductor never sent it) and of
the LLM mid-stream: every in-flight request ends within 1 s of the kill, failing with the rank
named, and a request admitted during the restart runs once the rank is back."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "kill_matrix", ROOT / "benchmarks" / "kill_matrix.py"
)
assert _spec is not None and _spec.loader is not None
km = importlib.util.module_from_spec(_spec)
sys.modules["kill_matrix"] = km
_spec.loader.exec_module(km)


@pytest.mark.slow
def test_killing_either_orpheus_rank_ends_every_request_at_once(monkeypatch) -> None:
    plan = "generated/orpheus/cpu-2rank"
    monkeypatch.chdir(ROOT)
    cluster = km.Cluster(plan, progress=None, ready_timeout=300, restarts=4).start()
    rng = random.Random(34)
    try:
        with km.TimedClient(cluster.client_address, idle_timeout=300) as client:
            count = km.outputs_of(client, "orpheus")
            assert count >= 3
            for rank, point in ((1, "handoff"), (0, "mid")):
                t = km.trial(cluster, client, plan, rank, point, count, 3, rng)
                assert not t.problems, t.problems
                assert len(t.outcomes) == 3 and all(e <= km.LIMIT for e in t.ends)
                assert t.outcomes.count("failed") >= 1  # the kill did reach a request
    finally:
        cluster.stop()
