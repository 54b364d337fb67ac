"""A dead rank comes back: the supervisor restarts a killed worker (it loads and captures again),
only the requests it held fail, a request that was waiting runs once it is back, health says
``degraded`` meanwhile, and past the restart budget the run ends for good, naming the rank.

On the failure-test model (a source on rank 0, a loop on rank 1; two requests run at once)."""

from __future__ import annotations

import time

import pytest
import torch

from tests.e2e.runtime_support import compile_faults, start, stop
from tests.narrow import present
from wgc_runtime.host.client import Client, RequestFailed

X = [("x", torch.arange(4, dtype=torch.float32))]
SLOW = {"steps": 1000, "delay_ms": 20}


@pytest.mark.slow
def test_a_killed_rank_is_restarted_and_serves_again(tmp_path) -> None:
    cluster = start(compile_faults(tmp_path), restarts=1)
    try:
        with Client(present(cluster.client_address), idle_timeout=120) as client:
            assert len(client.run(X, ["tensor"], {"steps": 2}, deadline=60)) == 2
            running = [client.submit(X, ["tensor"], SLOW, deadline=180) for _ in range(2)]
            its = [iter(s) for s in running]
            for it in its:
                next(it)  # both run (the cap is 2) ...
            waiting = client.submit(X, ["tensor"], {"steps": 3}, deadline=180)  # ... this waits
            t0 = time.monotonic()
            cluster.kill("rank 1")
            for it in its:  # the requests rank 1 held fail, with the reason
                with pytest.raises(RequestFailed) as info:
                    list(it)
                assert "rank 1 died (killed by SIGKILL)" in info.value.error.message
            seen = set()
            while time.monotonic() - t0 < 120 and cluster.health().status != "ok":
                seen.add(cluster.health().status)
                time.sleep(0.05)
            assert "degraded" in seen and cluster.health().status == "ok"
            assert cluster.health().restarts == 1 and len(cluster.restart_times) == 1
            # the waiting request ran on the new rank 1, and so does a new one
            assert len(waiting.collect()) == 3
            outs = client.run(X, ["tensor"], {"steps": 3}, deadline=60)
            expected = (torch.arange(4.0) + 1) * 2
            assert [present(o.value).tolist() for o in outs] == [
                (expected * 2**i).tolist() for i in range(3)
            ]
            assert cluster.failure is None
            print(f"\nrank 1 back {cluster.restart_times[0]:.1f} s after it died")
            # the budget (one restart) is spent: the next death is final
            cluster.kill("rank 1")
            failure = cluster.wait(30)
            assert failure is not None and failure.who == "rank 1"
            assert "no restart left (1 restart within 600 s)" in str(failure)
            assert cluster.health().status == "down"
    finally:
        stop(cluster)


@pytest.mark.slow
def test_without_a_budget_a_dead_rank_ends_the_run(tmp_path) -> None:
    cluster = start(compile_faults(tmp_path))
    try:
        cluster.kill("rank 0")
        failure = cluster.wait(30)
        assert failure is not None and str(failure) == "rank 0 died (killed by SIGKILL)"
    finally:
        stop(cluster)
