"""Workers started by another launcher, as a SLURM script would on each host: the conductor side
(``wgc run --external-workers JOIN.json``) and each rank's ``wgc worker --join JOIN.json --rank R``
as separate processes. The placement names two hosts (127.0.0.2 and 127.0.0.3: TCP with CURVE
between them, no shared memory), the outputs equal the in-process run's, a rank that never comes
is a clear error within the join timeout (exit 1, nothing left running), and a rank whose
``wgc worker`` is killed and started again rejoins within the restart budget."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.e2e.runtime_support import ROOT, TWO_RANKS, compile_faults, start, stop
from tests.narrow import present
from wgc.interp import segment
from wgc_runtime.host.client import Client
from wgc_runtime.host.local import LocalCluster
from wgc_runtime.host.processes.external import (
    ExternalWorkers,
    JoinError,
    join_boot,
    read_join,
    write_join,
)

HOSTS = TWO_RANKS + "hosts: {0: 127.0.0.2, 1: 127.0.0.3}\n"


class Run:
    """``wgc`` processes started with one marker in their environment, so that every process
    they start can be found afterwards (their children inherit it)."""

    def __init__(self) -> None:
        self.mark = uuid.uuid4().hex
        self.env = {**os.environ, "WGC_TEST_MARK": self.mark, "OMP_NUM_THREADS": "1"}

    def start(self, *args: str) -> subprocess.Popen:
        exe = Path(sys.executable).with_name("wgc")
        return subprocess.Popen(
            [str(exe), *args], cwd=ROOT, env=self.env, stderr=subprocess.PIPE, text=True
        )

    def left(self) -> list[int]:
        """Processes with the marker that are still running."""
        out = []
        needle = f"WGC_TEST_MARK={self.mark}".encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in environ and state != "Z":
                out.append(int(pid))
        return out


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> str:
    return compile_faults(tmp_path_factory.mktemp("external"), HOSTS)


@pytest.mark.slow
def test_workers_started_by_hand_match_the_in_process_run(plan, tmp_path) -> None:
    x = np.arange(4, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    c = LocalCluster(plan, strict=True)
    request = c.request([segment("x", torch.from_numpy(x))], ["tensor"], {"steps": 5})
    done = c.submit(request, seed=3).result()
    assert done.ok, done.error
    expected = [o.tensor.numpy() for o in done.outputs]
    join, out, run = tmp_path / "join.json", tmp_path / "out", Run()
    conductor = run.start(
        "run", plan, "--external-workers", str(join), "--join-timeout", "120",
        "--input", f"x={tmp_path / 'x.npy'}", "--option", "steps=5", "--seed", "3", "-o", str(out),
    )  # fmt: skip
    workers = [run.start("worker", "--join", str(join), "--rank", str(r)) for r in (0, 1)]
    code, err = finish(conductor, 240)
    assert code == 0, err
    for w in workers:
        wcode, werr = finish(w, 30)
        assert wcode == 0, werr  # stopped by the conductor side's Shutdown
        assert "joining tcp://127.0.0.2:" in werr
    got = [np.load(p) for p in sorted(out.glob("tensor_*.npy"))]
    assert len(got) == len(expected) == 5
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    assert not join.exists()  # removed with the run: it holds the deployment's secret
    assert run.left() == []
    assert not list(Path("/dev/shm").glob(f"wgc-{conductor.pid}-*"))


@pytest.mark.slow
def test_a_rank_that_never_comes_is_an_error_within_the_timeout(plan, tmp_path) -> None:
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    join, run = tmp_path / "join.json", Run()
    t0 = time.monotonic()
    conductor = run.start(
        "run", plan, "--external-workers", str(join), "--join-timeout", "5",
        "--input", f"x={tmp_path / 'x.npy'}",
    )  # fmt: skip
    rank0 = run.start("worker", "--join", str(join), "--rank", "0")
    code, err = finish(conductor, 120)
    took = time.monotonic() - t0
    assert code == 1, err
    assert "never joined within 5 s" in err and "Traceback" not in err
    assert f"on 127.0.0.3: wgc worker --join {join} --rank 1" in err
    assert 5 <= took < 60
    finish(rank0, 60)  # the conductor side stopped it, or it saw the conductor side go away
    assert not join.exists()
    assert run.left() == []
    assert not list(Path("/dev/shm").glob(f"wgc-{conductor.pid}-*"))


@pytest.mark.slow
def test_a_rank_started_again_by_its_launcher_rejoins(plan, tmp_path) -> None:
    """What ``restartPolicy: Always`` does on Kubernetes: rank 1's ``wgc worker`` is killed, the
    conductor side sees it go (its inbox closes) and waits within its restart budget; the rank
    started again with the same join file serves the same outputs."""
    join, run = tmp_path / "join.json", Run()
    workers = [run.start("worker", "--join", str(join), "--rank", str(r)) for r in (0, 1)]
    cluster = start(plan, external=ExternalWorkers(str(join), 120.0), restarts=1)
    try:
        assert cluster.client_address is not None and cluster.client_key is not None
        expected = outputs(cluster.client_address, cluster.client_key)
        workers[1].kill()  # the `wgc worker` process: its worker dies with it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and cluster.health().status == "ok":
            assert cluster.wait(0.05) is None
        assert cluster.health().status == "degraded"
        again = run.start("worker", "--join", str(join), "--rank", "1")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and cluster.health().status != "ok":
            assert cluster.wait(0.05) is None
        assert cluster.health().status == "ok" and len(cluster.restart_times) == 1
        assert outputs(cluster.client_address, cluster.client_key) == expected
        print(f"\nexternal: rank 1 serving again {cluster.restart_times[0]:.1f} s after its death")
    finally:
        stop(cluster)
    for w in (workers[0], again):
        assert finish(w, 30)[0] == 0
    assert run.left() == []


def outputs(address: str, key) -> list[list[float]]:
    with Client(address, key=key, idle_timeout=120) as client:
        x = [segment("x", torch.arange(4, dtype=torch.float32))]
        return [
            present(o.value).tolist() for o in client.run(x, ["tensor"], {"steps": 5}, deadline=120)
        ]


def test_the_join_file_is_private_and_checked(plan, tmp_path) -> None:
    """Mode 0600; a worker's plan must be the conductor side's (by its generated code), its rank
    in range; a file that is not a join file, or none in time, is an error naming it."""
    boot = {"parent": 1, "secret": b"k" * 32, "plan_dir": plan, "world": 2, "launcher": "x"}
    path = str(tmp_path / "join.json")
    write_join(path, {**boot, "launcher_host": "127.0.0.2"}, ("127.0.0.2", "127.0.0.3"), "p")
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.listdir(tmp_path) == ["join.json"]
    doc = read_join(path, 0)
    assert doc["boot"]["secret"] == b"k" * 32 and "parent" not in doc["boot"]
    one = join_boot(doc, 1)
    assert (one["host"], one["bind"], one["arena"], one["ipc_dir"]) == (
        "127.0.0.3", "127.0.0.3", None, None,
    )  # fmt: skip
    with pytest.raises(JoinError, match="rank 2 is not in this deployment"):
        join_boot(doc, 2)
    other = compile_faults(tmp_path / "other")  # the same model and placement names, no hosts
    with pytest.raises(JoinError, match="is not the conductor side's"):
        join_boot(doc, 0, other)
    Path(path).write_text("{}")
    with pytest.raises(JoinError, match="is not a wgc join file"):
        read_join(path, 0)
    with pytest.raises(JoinError, match="no join file"):
        read_join(str(tmp_path / "none.json"), 0.1)
