"""Hostile input never kills a process: while real requests run, another process sends 10,000
random and structurally plausible malformed messages to every endpoint of a deployment (the
client port, the conductor's inbox, each rank's inbox, the launcher's), some of them carrying
the deployment's secret, and plain TCP connections that send noise to the client port; every
real request completes with the right outputs, no process dies, the bad frames were counted, and
the sender was cut off.

``WGC_FUZZ_FRAMES`` (default 10,000 per endpoint) and ``WGC_FUZZ_SEED`` make a longer run, e.g.
``WGC_FUZZ_FRAMES=200000 pytest tests/e2e/test_hostile_frames.py -s``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.e2e.runtime_support import ROOT, compile_faults, start, stop
from tests.narrow import present
from wgc_runtime.host.client import Client

FRAMES = int(os.environ.get("WGC_FUZZ_FRAMES", "10000"))
SEED = int(os.environ.get("WGC_FUZZ_SEED", "14"))
X = [("x", torch.arange(4, dtype=torch.float32))]
EXPECTED = [((torch.arange(4.0) + 1) * 2 * 2**i).tolist() for i in range(3)]


@pytest.mark.slow
def test_malformed_frames_at_every_endpoint_kill_nothing(tmp_path) -> None:
    cluster = start(compile_faults(tmp_path))
    try:
        assert cluster.mesh is not None and cluster.client_address is not None
        targets = [
            {"secret": cluster.secret.hex()},
            {"kind": "client", "address": cluster.client_address},
            {"kind": "inbox", "address": cluster.mesh.address},  # the launcher's
            *({"kind": "inbox", "address": e.address} for e in cluster.table.values()),
        ]
        spec = tmp_path / "targets.json"
        spec.write_text(json.dumps(targets))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        fuzzer = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/e2e/frame_fuzz.py"), str(spec), str(FRAMES),
             str(SEED)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        done = 0
        with Client(present(cluster.client_address), idle_timeout=120) as client:

            def real(i: int) -> list[list[float]]:
                outs = client.run(X, ["tensor"], {"steps": 3}, deadline=120)
                return [present(o.value).tolist() for o in outs]

            while fuzzer.poll() is None or done < 20:
                with ThreadPoolExecutor(1) as pool:  # one Client is used by one thread
                    assert pool.submit(real, done).result() == EXPECTED
                done += 1
        out, err = fuzzer.communicate(timeout=600)
        assert fuzzer.returncode == 0, err
        assert out.count("sent ") == 5 and f"sent {FRAMES} " in out
        assert f"raw {max(1, FRAMES // 20)} connections to {cluster.client_address}" in out
        alive = {who: child.exitcode for who, child in cluster.procs.items()}
        assert all(code is None for code in alive.values()), alive
        assert cluster.failure is None and cluster.health().status == "ok"
        usage = cluster.usage(10)
        assert set(usage) == {"conductor", "rank 0", "rank 1"}
        for who, u in usage.items():
            assert u.dropped > 0, (who, u)
        assert sum(u.cut_off for u in usage.values()) >= 1  # the sender was cut off somewhere
        assert cluster.mesh is not None and cluster.mesh.guard.dropped > 0  # the launcher's
        print(
            f"\n{FRAMES} frames x 5 endpoints ({out.strip().splitlines()[-1]}); {done} real "
            f"requests ok; dropped: "
            + ", ".join(f"{w} {u.dropped} (cut off {u.cut_off})" for w, u in usage.items())
            + f", launcher {cluster.mesh.guard.dropped}"
        )
        # and it still serves
        with Client(present(cluster.client_address)) as client:
            t0 = time.monotonic()
            assert [
                present(o.value).tolist() for o in client.run(X, ["tensor"], {"steps": 3})
            ] == EXPECTED
            assert time.monotonic() - t0 < 30
    finally:
        stop(cluster)
