"""Multi-node on Ray, simulated on this machine with Ray's own cluster utilities: a head and two
more raylets (distinct node ids), one with the resource ``wgc_host:127.0.0.2``, one with
``wgc_host:127.0.0.3``. The failure-test model's placement names those hosts for its two ranks:
each rank's worker is started by a Ray actor on its node (not by this process), the data plane is
the wgc transport over TCP with CURVE between the two "hosts", the outputs equal the single-host
run's, a killed worker is started again on its node, and nothing is left when the run stops."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.e2e.runtime_support import ROOT, TWO_RANKS, compile_faults, compile_model, start, stop
from tests.narrow import present
from wgc.interp import segment
from wgc_runtime.host.client import Client
from wgc_runtime.host.local import LocalCluster
from wgc_runtime.host.processes import ray_launcher
from wgc_runtime.host.processes.ray_launcher import RayChild

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

X = [("x", torch.arange(4, dtype=torch.float32))]
HOSTS = TWO_RANKS + "hosts: {0: 127.0.0.2, 1: 127.0.0.3}\n"


@pytest.fixture(scope="module")
def ray_cluster():
    nodes = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    for host in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
        nodes.add_node(num_cpus=1, resources={f"wgc_host:{host}": 1})
    nodes.wait_for_nodes(timeout=300)  # a loaded machine starts raylets slowly
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def outputs(address: str, key, options: dict) -> list[list[float]]:
    with Client(address, key=key, idle_timeout=120) as client:
        return [present(o.value).tolist() for o in client.run(X, ["tensor"], options, deadline=120)]


@pytest.mark.slow
def test_ranks_on_two_ray_nodes_match_one_host(tmp_path, ray_cluster) -> None:
    local = start(compile_faults(tmp_path / "local"))
    try:
        assert local.client_address is not None
        expected = outputs(local.client_address, None, {"steps": 5})
    finally:
        stop(local)
    cluster = start(compile_faults(tmp_path / "ray", HOSTS), ray=ray_cluster.address, restarts=1)
    try:
        assert cluster.client_address is not None and cluster.client_key is not None
        # the workers are children of Ray actors on their nodes, not of this process
        me = os.getpid()
        agents = {who: parent_of(pid) for who, pid in cluster.pids.items() if who != "conductor"}
        assert parent_of(cluster.pids["conductor"]) == me
        assert len(set(agents.values())) == 2 and me not in agents.values()
        ranks = [cluster.procs[f"rank {r}"] for r in (0, 1)]
        assert all(isinstance(r, RayChild) for r in ranks)
        assert len({r.node_id for r in ranks}) == 2  # type: ignore[attr-defined]
        assert cluster.table["rank 1"].address.startswith("tcp://127.0.0.3:")
        assert outputs(cluster.client_address, cluster.client_key, {"steps": 5}) == expected
        # a killed worker is placed on its node again and serves
        node = ranks[1].node_id  # type: ignore[attr-defined]
        cluster.kill("rank 1")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (
            cluster.restart_times and cluster.health().status == "ok"
        ):
            assert cluster.wait(0.05) is None  # not a final failure
        assert len(cluster.restart_times) == 1 and cluster.health().status == "ok"
        again = cluster.procs["rank 1"]
        assert isinstance(again, RayChild) and again.node_id == node
        assert outputs(cluster.client_address, cluster.client_key, {"steps": 5}) == expected
        print(f"\nray: rank 1 back on its node in {cluster.restart_times[0]:.1f} s")
    finally:
        stop(cluster)


def host_agents() -> dict[str, str]:
    """Every `HostAgent` actor the Ray cluster has seen (alive or not) -> its node id (Ray's
    debugging table: the state API needs the dashboard, which the fixture leaves out)."""
    from ray._private.state import actors

    return {
        k: a["Address"]["NodeID"] for k, a in actors().items() if a["ActorClassName"] == "HostAgent"
    }


@pytest.mark.slow
def test_wgc_run_with_ray_places_the_ranks_and_matches_one_host(tmp_path, ray_cluster) -> None:
    """`wgc run --ray ADDRESS` is `wgc serve --ray`'s placement for one request: its ranks on
    the two "hosts"' nodes, the outputs those of the in-process run."""
    import numpy as np

    ray_launcher.connect(ray_cluster.address)  # this process reads Ray's actor table
    plan = compile_faults(tmp_path / "ray", HOSTS)
    c = LocalCluster(plan, strict=True)
    done = c.submit(c.request([segment("x", X[0][1])], ["tensor"], {"steps": 5}), seed=3).result()
    assert done.ok, done.error
    np.save(tmp_path / "x.npy", X[0][1].numpy())
    before = set(host_agents())
    r = subprocess.run(
        [str(Path(sys.executable).with_name("wgc")), "run", plan, "--ray", ray_cluster.address,
         "--input", f"x={tmp_path / 'x.npy'}", "--option", "steps=5", "--seed", "3",
         "-o", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = [np.load(p) for p in sorted((tmp_path / "out").glob("tensor_*.npy"))]
    assert len(got) == len(done.outputs) == 5
    assert all(np.array_equal(a, o.tensor.numpy()) for a, o in zip(got, done.outputs, strict=True))
    # its two workers were started by Ray actors on the two hosts' nodes
    agents = {k: v for k, v in host_agents().items() if k not in before}
    assert len(agents) == 2 and len(set(agents.values())) == 2


ORPHEUS = ROOT / "wgc_models" / "orpheus"
THREE_HOSTS = "hosts: {0: 127.0.0.2, 1: 127.0.0.3, 2: 127.0.0.4}\n"


def speech(address: str, key) -> list[list[float]]:
    with Client(address, key=key, idle_timeout=120) as client:
        stream = client.submit(
            [segment("text", "hello")], ["audio"], {"max_tokens": 70}, deadline=300,
            request_id="ray-orpheus", seed=7,
        )  # fmt: skip
        return [present(o.value).flatten().tolist() for o in stream.collect()]


@pytest.mark.slow
def test_orpheus_on_three_ray_nodes_matches_one_host(tmp_path, ray_cluster) -> None:
    """Prefill on one node, decode on another (its K/V pages cross "hosts" over TCP), SNAC on a
    third: the same audio as the three ranks on one host."""
    yaml = (ORPHEUS / "placements" / "cpu-3rank.yaml").read_text()
    local = start(compile_model(ORPHEUS / "orpheus.walk", tmp_path / "local", yaml))
    try:
        expected = speech(local.client_address or "", None)
    finally:
        stop(local)
    assert expected, "no audio"
    plan = compile_model(ORPHEUS / "orpheus.walk", tmp_path / "ray", yaml + THREE_HOSTS)
    cluster = start(plan, ray=ray_cluster.address)
    try:
        ranks = [cluster.procs[f"rank {r}"] for r in range(3)]
        assert len({r.node_id for r in ranks}) == 3  # type: ignore[attr-defined]
        assert speech(cluster.client_address or "", cluster.client_key) == expected
    finally:
        stop(cluster)
