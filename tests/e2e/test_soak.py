"""Soak: 1,000 requests from four client threads, a quarter of them plain, the rest cancelled
mid-stream, past a short deadline, or abandoned by a client that just goes away, with rank 1
killed (and restarted) in the middle. Every plain request returns exactly its outputs (or, only
while rank 1 is down, fails saying so); nothing is held afterwards (no live request, no KV page
promised or in use on any rank); the conductor's file descriptors (its sockets) and every
process's RSS stay flat after warm-up; after the stop no process and no shared memory is left.

The RSS curve (MB per process after each round of 100 requests) is printed with ``-s``. On the
failure-test model (a source on rank 0, a loop on rank 1 that appends one K/V token per step to
the paged pool; two requests run at once, the rest queue)."""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.e2e.runtime_support import compile_faults, start, stop
from tests.narrow import present
from wgc_runtime.host.client import Client, RequestFailed, RequestTimeout

ROUNDS, PER_ROUND, THREADS = 10, 100, 4
KILL_ROUND = 5
WARM = 3  # rounds before RSS and descriptors count
X = [("x", torch.arange(4, dtype=torch.float32))]
LONG = {"steps": 200, "delay_ms": 5}


def expected(steps: int) -> list[list[float]]:
    return [((torch.arange(4.0) + 1) * 2 * 2**i).tolist() for i in range(steps)]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Soak:
    def __init__(self, address: str) -> None:
        self.address = address
        self.outcomes: dict[str, int] = {}
        self.lock = threading.Lock()
        self.rank_down = threading.Event()  # set from the kill until rank 1 is back

    def count(self, what: str) -> None:
        with self.lock:
            self.outcomes[what] = self.outcomes.get(what, 0) + 1

    def one(self, client: Client, rng: random.Random) -> None:
        kind = rng.choice(["plain", "cancel", "deadline", "gone"])
        down = self.rank_down.is_set()
        try:
            if kind == "plain":
                steps = rng.randint(1, 4)
                outs = client.run(X, ["tensor"], {"steps": steps}, deadline=120)
                assert [present(o.value).tolist() for o in outs] == expected(steps)
            elif kind == "cancel":
                stream = client.submit(X, ["tensor"], LONG, deadline=120)
                it = iter(stream)
                next(it)
                stream.cancel()
                try:
                    list(it)
                except RequestFailed as exc:
                    assert exc.error.kind == "cancelled", exc.error
            elif kind == "deadline":
                try:
                    client.run(X, ["tensor"], LONG, deadline=rng.uniform(0.05, 0.3))
                    raise AssertionError("a 1 s request finished within its short deadline")
                except RequestTimeout:
                    pass
            else:  # a client that goes away mid-stream: its socket closes, no cancel
                gone = Client(self.address, idle_timeout=120)
                try:
                    next(iter(gone.submit(X, ["tensor"], LONG, deadline=120)))
                finally:
                    gone.sock.close(0)
                    gone.close()  # its cancel cannot go out on the closed socket
            self.count(kind)
        except RequestFailed as exc:
            # only while rank 1 is down (or was when the request started) may one fail so
            assert (down or self.rank_down.is_set()) and "rank 1 died" in exc.error.message, (
                kind,
                exc.error,
            )
            self.count(f"{kind}: rank 1 died")

    def worker(self, seed: int, n: int) -> None:
        rng = random.Random(seed)
        with Client(self.address, idle_timeout=120) as client:
            for _ in range(n):
                self.one(client, rng)


@pytest.mark.slow
def test_a_thousand_requests_with_cancels_deadlines_disconnects_and_a_dead_rank(
    tmp_path,
) -> None:
    cluster = start(compile_faults(tmp_path), restarts=1)
    try:
        assert cluster.client_address is not None
        soak = Soak(cluster.client_address)
        curve: list[dict[str, float]] = []
        descriptors: list[int] = []
        t0 = time.monotonic()
        for round_ in range(ROUNDS):
            with ThreadPoolExecutor(THREADS) as pool:
                jobs = [
                    pool.submit(soak.worker, 1000 * round_ + t, PER_ROUND // THREADS)
                    for t in range(THREADS)
                ]
                if round_ == KILL_ROUND:
                    soak.rank_down.set()
                    cluster.kill("rank 1")
                for job in jobs:
                    job.result()
            if round_ == KILL_ROUND:
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline and not (
                    cluster.restart_times and cluster.health().status == "ok"
                ):
                    assert cluster.wait(0.05) is None
                assert cluster.health().status == "ok"
                soak.rank_down.clear()
            curve.append({who: rss_mb(pid) for who, pid in cluster.pids.items()})
            descriptors.append(fds(cluster.pids["conductor"]))
        took = time.monotonic() - t0
        # nothing held: no live request, no page promised (conductor) or in use (ranks)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            usage = cluster.usage(10)
            if all(u.requests == 0 and not any(n for _, n in u.kv_pages) for u in usage.values()):
                break
            time.sleep(0.1)
        assert set(usage) == {"conductor", "rank 0", "rank 1"}
        for who, u in usage.items():
            assert u.requests == 0 and not any(n for _, n in u.kv_pages), (who, u)
        assert sum(soak.outcomes.values()) == ROUNDS * PER_ROUND, soak.outcomes
        assert soak.outcomes.get("plain", 0) > 150 and len(cluster.restart_times) == 1
        assert cluster.failure is None
        print(f"\nsoak: {ROUNDS * PER_ROUND} requests in {took:.1f} s: {soak.outcomes}")
        print(f"rank 1 back {cluster.restart_times[0]:.1f} s after it was killed")
        print("RSS MB after each round: " + "; ".join(
            f"{who} " + " ".join(f"{c[who]:.0f}" for c in curve) for who in curve[0]
        ))  # fmt: skip
        print(f"conductor fds after each round: {descriptors}")
        # flat after warm-up (rank 1 is a new process from the kill round on)
        for who in ("conductor", "rank 0"):
            assert curve[-1][who] - curve[WARM][who] < 64, (who, curve)
        assert curve[-1]["rank 1"] - curve[KILL_ROUND + 1]["rank 1"] < 64, curve
        assert descriptors[-1] <= descriptors[WARM] + 8, descriptors
    finally:
        stop(cluster)
