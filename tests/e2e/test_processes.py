"""The runtime as processes: a conductor and one worker per rank over ZeroMQ, spawned by the
launcher, driven through the client; and `wgc run`.

Every test asserts bounded time and that no shared-memory segment of the run is left in
``/dev/shm``. Clusters are shared per module where tests do not break them (starting one costs
a few seconds: every process imports torch).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.narrow import all_present, present

ROOT = Path(__file__).resolve().parents[2]
if (
    str(ROOT) not in sys.path
):  # node modules import as `wgc_models.<family>.nodes` (registered: `orpheus.nodes`)
    sys.path.insert(0, str(ROOT))

from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc.interp import load_model, make_request, run_request, segment  # noqa: E402
from wgc_runtime.host.client import Client, RequestFailed  # noqa: E402
from wgc_runtime.host.processes.launcher import Cluster  # noqa: E402
from wgc_runtime.host.transport.arena import leaked_segments  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")

FAULTS = ROOT / "tests" / "e2e" / "faults"


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)  # workers import node impls relative to the project root


def ours() -> set[str]:
    """Segments this test process created (names carry the creating launcher's pid; other
    test runs may share /dev/shm)."""
    return leaked_segments(f"wgc-{os.getpid()}-")


def orphaned() -> set[str]:
    """Segments whose creating process is gone: leaked for good."""
    out = set()
    for name in leaked_segments():
        pid = name.split("-")[1]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            out.add(name)
        except (ValueError, PermissionError):
            pass
    return out


@pytest.fixture(scope="module", autouse=True)
def _no_leaks():
    yield
    assert ours() == set(), "shared memory left in /dev/shm"


def start(plan_dir, **kw) -> Cluster:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return Cluster(plan_dir, progress=None, ready_timeout=120, **kw).start()
    finally:
        os.chdir(cwd)


def stop(cluster: Cluster) -> None:
    pids = [p.pid for p in cluster.procs.values()]
    arena = cluster.segment.name if cluster.segment else None
    cluster.stop()
    for pid in pids:  # no orphans
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    if arena:
        assert arena not in leaked_segments()


@pytest.fixture(scope="module")
def faults_dir(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("faults")
    result = Driver().compile(
        str(FAULTS / "faults.walk"), str(FAULTS / "placements" / "cpu-2rank.yaml")
    )
    assert result.ok, [d.message for d in result.errors]
    sync(out, result.files, check=False)
    return str(out)


# ---------------------------------------------------------------------------- examples


def reference(family: str, inputs, want, options, rid: str):
    m = load_model(str(ROOT / "wgc_models" / family / f"{family}.walk"))
    return run_request(m, make_request(m, inputs, want, options), request_id=rid)


def check_against_reference(client: Client, family: str, inputs, want, options, rid: str):
    t0 = time.monotonic()
    outs = client.submit(inputs, want, options, deadline=60, request_id=rid).collect()
    assert time.monotonic() - t0 < 60
    ref = reference(family, inputs, want, options, rid)
    assert ref.ok, ref.error
    got: dict[tuple[str, str, str], list] = {}
    for o in outs:
        got.setdefault((o.flow, o.walk, o.modality), []).append(present(o.value))
    want_by_key = ref.by_key()
    assert got.keys() == want_by_key.keys()
    for key, values in want_by_key.items():
        assert len(got[key]) == len(values), key
        for a, b in zip(got[key], all_present(values), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
    return outs


ORPHEUS = ([segment("text", "hello")], ["audio"])


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["cpu", "cpu-2rank"])
def test_orpheus_matches_the_reference_on_1_and_2_ranks(placement) -> None:
    cluster = start(ROOT / "generated" / "orpheus" / placement)
    try:
        with Client(present(cluster.client_address)) as client:
            for n in (35, 5):
                outs = check_against_reference(
                    client, "orpheus", *ORPHEUS, {"max_tokens": n}, f"orpheus-{n}"
                )
                assert len(outs) == (2 if n == 35 else 0)
            # more tokens than the stream buffer holds (capacity 112): the producer on rank 0
            # must wait for acks from rank 1 (back-pressure across processes), and finish
            outs = check_against_reference(
                client, "orpheus", *ORPHEUS, {"max_tokens": 300}, "orpheus-long"
            )
            assert len(outs) == (300 - 28) // 7 + 1
            # requests side by side
            streams = [
                client.submit(*ORPHEUS, {"max_tokens": 20 + i}, deadline=60) for i in range(4)
            ]
            assert [len(s.collect()) for s in streams] == [0, 0, 0, 0]
            assert not cluster.failure
    finally:
        stop(cluster)


@pytest.mark.slow
def test_three_ranks_match_the_reference() -> None:
    cluster = start(ROOT / "generated" / "qwen3_omni" / "cpu-3rank")
    try:
        with Client(present(cluster.client_address)) as client:
            inputs = [segment("text", "hello"), segment("audio", torch.linspace(-1, 1, 1600))]
            outs = check_against_reference(
                client,
                "qwen3_omni",
                inputs,
                ["text", "audio"],
                {"max_tokens": 6, "max_frames": 30},
                "omni-0",
            )
            assert {o.modality for o in outs} == {"text", "audio"}
    finally:
        stop(cluster)


# ---------------------------------------------------------------------------- failures


@pytest.fixture(scope="module")
def faults(faults_dir):
    cluster = start(faults_dir)
    client = Client(present(cluster.client_address))
    yield cluster, client
    client.close()
    stop(cluster)


X = [segment("x", torch.arange(4, dtype=torch.float32))]


@pytest.mark.slow
def test_faults_model_runs(faults) -> None:
    _, client = faults
    outs = client.run(X, ["tensor"], {"steps": 3}, deadline=20)
    expected = (torch.arange(4.0) + 1) * 2
    assert len(outs) == 3
    for i, o in enumerate(outs):
        assert o.iteration == (i,) and torch.equal(o.value, expected * 2**i)


@pytest.mark.slow
def test_a_raising_node_fails_its_request_and_others_continue(faults) -> None:
    _, client = faults
    t0 = time.monotonic()
    slow = client.submit(X, ["tensor"], {"steps": 5, "delay_ms": 50}, deadline=20)
    bad = client.submit(X, ["tensor"], {"fail": True}, deadline=20)
    with pytest.raises(RequestFailed) as info:
        bad.collect()
    error = info.value.error
    assert error.kind == "node" and error.cause == "input"  # a NodeInputError: the request's fault
    assert error.node == "source" and error.walk == "main"
    assert "the source was told to fail" in error.message
    assert len(slow.collect()) == 5
    assert time.monotonic() - t0 < 20


@pytest.mark.slow
def test_cancel_mid_loop_releases_state_on_every_rank(faults, tmp_path) -> None:
    _, client = faults
    options = {"steps": 1000, "delay_ms": 20, "marker_dir": str(tmp_path)}
    stream = client.submit(X, ["tensor"], options, deadline=30)
    it = iter(stream)
    first = next(it)  # the loop is running on rank 1
    assert first.iteration == (0,)
    t0 = time.monotonic()
    stream.cancel()
    with pytest.raises(RequestFailed) as info:
        list(it)
    assert info.value.error.kind == "cancelled"
    markers = {f"source-released-{stream.rid}", f"step-released-{stream.rid}"}
    while time.monotonic() - t0 < 5 and not markers <= {p.name for p in tmp_path.iterdir()}:
        time.sleep(0.02)
    assert markers <= {p.name for p in tmp_path.iterdir()}, "a rank kept the request's state"
    assert time.monotonic() - t0 < 5


@pytest.mark.slow
def test_overload_queues_behind_the_admission_cap(faults) -> None:
    _, client = faults
    t0 = time.monotonic()
    streams = [
        client.submit(X, ["tensor"], {"steps": 4, "delay_ms": 30}, deadline=30) for _ in range(6)
    ]
    results = [s.collect() for s in streams]  # cap 2: four wait, none is lost
    assert [len(r) for r in results] == [4] * 6
    assert any(s.queued for s in streams), "nothing was queued behind the cap of 2"
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
def test_a_killed_worker_fails_in_flight_requests_within_5_s(faults_dir) -> None:
    cluster = start(faults_dir)
    try:
        with Client(present(cluster.client_address)) as client:
            stream = client.submit(X, ["tensor"], {"steps": 1000, "delay_ms": 20}, deadline=30)
            it = iter(stream)
            next(it)
            t0 = time.monotonic()
            cluster.kill("rank 1")
            with pytest.raises(RequestFailed) as info:
                list(it)
            assert time.monotonic() - t0 < 5
            assert "rank 1 died" in info.value.error.message
            assert "SIGKILL" in info.value.error.message
            assert cluster.wait(5) is not None and present(cluster.failure).who == "rank 1"
            # later requests are refused at once, not left hanging
            with pytest.raises(RequestFailed):
                client.run(X, ["tensor"], deadline=10)
    finally:
        stop(cluster)


@pytest.mark.slow
def test_a_killed_conductor_fails_in_flight_requests_within_a_second(faults_dir) -> None:
    cluster = start(faults_dir)
    try:
        with Client(present(cluster.client_address), idle_timeout=60) as client:
            stream = client.submit(X, ["tensor"], {"steps": 1000, "delay_ms": 20}, deadline=60)
            it = iter(stream)
            next(it)
            t0 = time.monotonic()
            cluster.kill("conductor")
            with pytest.raises(RequestFailed) as info:
                list(it)
            assert time.monotonic() - t0 < 1.0, time.monotonic() - t0
            assert "lost the connection to the conductor" in info.value.error.message
    finally:
        stop(cluster)


@pytest.mark.slow
def test_a_stranger_cannot_stop_the_deployment(faults_dir) -> None:
    """A `Shutdown` from a process that is not part of the deployment (it can reach every port,
    but does not hold the secret) is dropped: the run keeps serving."""
    import zmq

    from wgc_runtime.contract import control as c
    from wgc_runtime.host.transport.codec import Codec

    cluster = start(faults_dir)
    ipc_dir = cluster.ipc_dir
    assert ipc_dir is not None and (os.stat(ipc_dir).st_mode & 0o777) == 0o700
    try:
        assert cluster.mesh is not None
        frames = Codec(c.INBOX).encode([c.Shutdown()])
        sock = zmq.Context.instance().socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 1000)
        for address in cluster.mesh.peers.values():
            sock.connect(address)
        for _ in range(2 * len(cluster.mesh.peers)):  # round robin: every peer gets some
            sock.send_multipart(frames)
            sock.send_multipart([b"\0" * 32, *frames])
        sock.close()
        time.sleep(0.5)
        with Client(present(cluster.client_address)) as client:
            assert client.run(X, ["tensor"], {"steps": 2}, deadline=30)
        assert cluster.failure is None
    finally:
        stop(cluster)
    assert not os.path.exists(ipc_dir)  # the sockets' folder goes with the run


# ---------------------------------------------------------------------------- wgc run


def wgc(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("wgc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_wgc_run_orpheus_two_ranks_writes_audio(tmp_path) -> None:
    """The issue's done-when command."""
    before = orphaned()
    t0 = time.monotonic()
    r = wgc(
        "run",
        "wgc_models/orpheus/orpheus.walk",
        "--placement",
        "wgc_models/orpheus/placements/cpu-2rank.yaml",
        "--input",
        "text=hello",
        "--want",
        "audio",
        "-o",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 90
    assert "ready" in r.stderr and "rank 1" in r.stderr  # progress while workers load
    import wave

    with wave.open(str(tmp_path / "audio.wav")) as w:
        assert w.getframerate() == 24_000 and w.getsampwidth() == 2
        # `max_tokens` 280: 40 frames of 2048 samples but the first and the last two: 3.2 s
        assert w.getnframes() == 37 * 2048
    assert "wgc: audio: 3.16 s at 24000 Hz in 37 chunks; first audio after " in r.stderr
    assert "real-time factor" in r.stderr
    assert orphaned() - before == set()


@pytest.mark.slow
def test_wgc_run_local_matches(tmp_path) -> None:
    r = wgc(
        "run",
        "generated/orpheus/cpu-2rank",
        "--local",
        "--input",
        "text=hello",
        "--want",
        "audio",
        "-o",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "audio.wav").stat().st_size == 44 + 37 * 2048 * 2


@pytest.mark.slow
def test_wgc_run_exits_non_zero_when_a_worker_dies(faults_dir, tmp_path) -> None:
    before = orphaned()
    t0 = time.monotonic()
    r = wgc("run", faults_dir, "--input", "x=" + _npy(tmp_path), "--option", "die=true")
    assert r.returncode == 1, r.stderr
    assert "rank 1 died (killed by SIGKILL)" in r.stderr
    assert time.monotonic() - t0 < 60
    assert orphaned() - before == set()


@pytest.mark.slow
def test_wgc_run_reports_a_failing_node(faults_dir, tmp_path) -> None:
    r = wgc("run", faults_dir, "--local", "--input", "x=" + _npy(tmp_path), "--option", "fail=1")
    assert r.returncode == 1
    assert "the source was told to fail" in r.stderr


def _npy(tmp_path: Path) -> str:
    import numpy as np

    path = tmp_path / "x.npy"
    np.save(path, np.arange(4, dtype=np.float32))
    return str(path)
