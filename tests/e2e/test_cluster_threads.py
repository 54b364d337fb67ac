"""A `Cluster` started from a thread that then ends keeps its processes: Linux's parent-death
signal fires when the spawning *thread* exits, so only children of the main thread use it (the
others rely on the parent watchdog, `wgc_runtime.host.processes.child.die_with_parent`). Two
deployments started at once from a thread pool both serve, and a killed launcher still takes
every child with it (`test_processes`)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.e2e.runtime_support import compile_faults, start, stop
from wgc_runtime.host.client import Client

X = [("x", torch.arange(4, dtype=torch.float32))]


@pytest.mark.slow
def test_clusters_started_from_threads_that_end_keep_serving(tmp_path) -> None:
    plans = [compile_faults(tmp_path / f"d{i}") for i in range(2)]
    with ThreadPoolExecutor(2) as pool:  # the pool's threads end with the block
        clusters = list(pool.map(start, plans))
    try:
        time.sleep(0.5)  # a parent-death signal would have killed the children by now
        for cluster in clusters:
            assert cluster.failure is None
            assert cluster.client_address is not None
            with Client(cluster.client_address, key=cluster.client_key) as client:
                assert len(client.run(X, ["tensor"], {"steps": 2}, deadline=60)) == 2
    finally:
        for cluster in clusters:
            stop(cluster)
