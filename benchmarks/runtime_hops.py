"""Runtime latency benchmarks: cross-rank hops, same-rank dispatch, 16 MiB hand-over (and Ray).

    .venv/bin/python benchmarks/runtime_hops.py [--requests N] [--rounds R]
        [--ray-python PYTHON_WITH_RAY] [--markdown PATH]

Every number is measured in the same run as its baseline, on this machine. The served numbers
(hop10 on 1 and 2 ranks, dispatch100, chain3) are taken for both same-host transports, ZeroMQ
(``WGC_RING=0``) and the rings (``WGC_RING=1``, `wgc_runtime.host.transport.ring`), in ``R``
interleaved rounds with the raw baselines (pyzmq one-way over tcp and ipc, the rings' own
one-way hop) and, with ``--ray-python``, a block of a warm Ray Compiled Graph chain in every
round (one Ray process kept alive, never measured right after ``ray.init``); each row is the
median over the rounds with the min–max, ratios taken within a round. The load is printed.

* **cross-rank hop**: ``benchmarks/models/hop10.walk`` (10 no-op nodes) placed alternating
  between 2 ranks, run as processes (conductor + 2 workers); the median request latency divided
  by the 13 process hops on its critical path (client -> conductor -> rank 0 -> 9 rank-to-rank
  hops -> conductor -> client; node work counted against the hops, so this is an upper bound),
  and the marginal cost of a cross-rank hop: (median latency with 2 ranks - with 1 rank) / 9.
  Baselines: a raw pyzmq one-way hop (PUSH/PULL over TCP loopback, and over ``ipc``, between two
  processes, a small msgpack message; half the median round trip), and the same 13-hop route
  through 4 processes (client, conductor, 2 ranks) with nothing but pyzmq in them
  (`raw_route`): what the topology costs before any Python work.
  ``--hops-only --repeat K --busy 0 500`` repeats just these K times, interleaved, with each
  busy-poll window (``WGC_BUSY_POLL_US``) as a configuration, and reports the best of each and
  the runtime processes' CPU time per request (``/proc`` schedstat, every thread).
* **same-rank dispatch**: ``dispatch100.walk`` (100 no-op nodes) on one rank; median per-node
  time in the executor (`LocalCluster`, no transport) and in a worker process, minus a direct
  Python call of the node's ``forward``. ``--dispatch-only`` pairs the generated dispatch of
  plain pieces (`wgc_runtime.core.executor.direct`) with the generic executor
  (``WGC_DIRECT=0``) in interleaved rounds: per node in `LocalCluster` and in a worker, the
  marginal node ((dispatch100 - hop10 on 1 rank) / 90, latency and CPU), and chain3.
* **direct outputs**: ``--outputs-only`` pairs outputs sent by the producing rank straight to
  the client (``WGC_DIRECT_OUT=1``, `wgc_runtime.contract.route`) with outputs through
  the conductor (``0``) in interleaved rounds: chain3 and hop10 on 2 ranks, the latency to the
  output and to the request's end (its `Finished` still comes from the conductor), and CPU.
* **tensor hand-over**: 16 MiB from one process to another through the shared-memory arena
  (descriptor only), as zero-copy ZeroMQ frames, and as a copied ZeroMQ message; median of the
  round trip (receiver answers with a small ack once it holds the tensor; arena blocks are
  released back to the owner as in the runtime).
* **Ray Compiled Graph** (optional): the 3-stage chain as a Ray compiled DAG of three actors, if
  ``ray`` imports (run this script with a Python that has ray, or see the README).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

MODELS = ROOT / "benchmarks" / "models"
PLANS = {
    "hop10-2rank": ("hop10.walk", "hop10-2rank.yaml"),
    "hop10-1rank": ("hop10.walk", "hop10-1rank.yaml"),
    "dispatch100-1rank": ("dispatch100.walk", "dispatch100-1rank.yaml"),
    "chain3-3rank": ("chain3.walk", "chain3-3rank.yaml"),
}


def compile_all(out: Path) -> dict[str, str]:
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    dirs = {}
    for name, (walk, placement) in PLANS.items():
        result = Driver().compile(str(MODELS / walk), str(MODELS / "placements" / placement))
        if not result.ok:
            raise SystemExit(f"{walk} @ {placement}: {[d.message for d in result.errors]}")
        sync(out / name, result.files, check=False)
        dirs[name] = str(out / name)
    return dirs


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


# ------------------------------------------------------------------------- raw pyzmq


def _echo(address_in: str, address_out: str, n: int) -> None:
    import zmq

    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.connect(address_in)
    push.connect(address_out)
    for _ in range(n):
        push.send_multipart(pull.recv_multipart(copy=False), copy=False)
    pull.close(0)
    push.close(0)
    ctx.term()


def raw_zmq_one_way(n: int, transport: str = "tcp") -> float:
    """Half the median round trip of a small msgpack message between two processes (PUSH/PULL
    over ``tcp`` loopback or ``ipc``), both sides blocking in ``recv``."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    if transport == "tcp":
        a = f"tcp://127.0.0.1:{push.bind_to_random_port('tcp://127.0.0.1')}"
        b = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    else:
        a, b = f"ipc://@wgc-bench-{os.getpid()}-a", f"ipc://@wgc-bench-{os.getpid()}-b"
        push.bind(a)
        pull.bind(b)
    mp = multiprocessing.get_context("spawn")
    proc = mp.Process(target=_echo, args=(a, b, n + 50))
    proc.start()
    msg = msgpack.packb({"t": "Value", "request": "r", "walk_id": 1, "call": 3, "port": "x"})
    samples = []
    for i in range(n + 50):
        t0 = time.perf_counter()
        push.send(msg)
        pull.recv()
        if i >= 50:
            samples.append((time.perf_counter() - t0) / 2)
    proc.join()
    push.close(0)
    pull.close(0)
    ctx.term()
    return median_us(samples)


def _ring_wait(rings) -> list[bytes]:
    """The next record's header frame, sleeping on the doorbell as `Mesh.wait` does."""
    import select

    poller = select.poll()
    poller.register(rings.bell, select.POLLIN)
    while not rings.ready():
        rings.sleeping(True)
        rings.drain_bell()
        if not rings.ready():
            poller.poll(1000)
        rings.sleeping(False)
    return [bytes(frames[0]) for frames in rings.take()]


def _ring_echo(name: str, cap: int, folder: str, n: int) -> None:
    from multiprocessing import shared_memory

    from wgc_runtime.host.transport.ring import Rings, token_of

    shm = shared_memory.SharedMemory(name=name)
    assert shm.buf is not None
    rings = Rings(shm.buf, 0, 3, cap, 1, token_of("b"), folder)
    rings.connect(0, "a")
    got = 0
    while got < n:
        for head in _ring_wait(rings):
            rings.send(0, [head])
            got += 1
    rings.close()
    shm.close()


def raw_ring_one_way(n: int) -> float:
    """Half the median round trip of the same small message through two same-host rings
    (`wgc_runtime.host.transport.ring`), both sides sleeping on their doorbells between
    messages: the rings' floor, as `raw_zmq_one_way` is ZeroMQ's."""
    from multiprocessing import shared_memory

    import msgpack

    from wgc_runtime.host.transport.ring import Rings, ring_bytes, token_of

    cap = 1 << 16
    shm = shared_memory.SharedMemory(create=True, size=ring_bytes(3, cap))
    folder = tempfile.mkdtemp(prefix="wgc-bench-ring-")
    assert shm.buf is not None
    rings = Rings(shm.buf, 0, 3, cap, 0, token_of("a"), folder)
    rings.connect(1, "b")
    mp = multiprocessing.get_context("spawn")
    proc = mp.Process(target=_ring_echo, args=(shm.name, cap, folder, n + 50))
    proc.start()
    msg = msgpack.packb({"t": "Value", "request": "r", "walk_id": 1, "call": 3, "port": "x"})
    samples = []
    for i in range(n + 50):
        t0 = time.perf_counter()
        rings.send(1, [msg])
        _ring_wait(rings)
        if i >= 50:
            samples.append((time.perf_counter() - t0) / 2)
    proc.join()
    rings.close()
    shm.close()
    shm.unlink()
    return median_us(samples)


def _forwarder(me: str, inbox: str, table: dict[str, str], route: list[str], n: int) -> None:
    """One process of `raw_route`: forward every message to the next process on its route."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(inbox)
    pushes = {}
    for peer, address in table.items():
        pushes[peer] = ctx.socket(zmq.PUSH)
        pushes[peer].connect(address)
    mine = sum(1 for who in route[1:] if who == me)
    for _ in range(n * mine):
        hop = msgpack.unpackb(pull.recv())
        pushes[route[hop + 1]].send(msgpack.packb(hop + 1))
    time.sleep(0.2)
    for sock in (pull, *pushes.values()):
        sock.close(0)
    ctx.term()


def raw_route(route: list[str], n: int) -> float:
    """The runtime's process topology with nothing but pyzmq in it: a message follows ``route``
    (process names; the first is this process, the client) over ``ipc`` PUSH/PULL, each process
    blocking in ``recv`` and forwarding at once. Median time per hop, in µs."""
    import msgpack
    import zmq

    names = sorted(set(route[1:]) - {route[0]})
    table = {who: f"ipc://@wgc-bench-{os.getpid()}-{who}" for who in [route[0], *names]}
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(table[route[0]])
    procs = [
        multiprocessing.get_context("spawn").Process(
            target=_forwarder, args=(who, table[who], table, route, n + 20)
        )
        for who in names
    ]
    for proc in procs:
        proc.start()
    first = ctx.socket(zmq.PUSH)
    first.connect(table[route[1]])
    time.sleep(0.5)  # every process bound and connected
    samples = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        first.send(msgpack.packb(1))
        pull.recv()
        if i >= 20:
            samples.append((time.perf_counter() - t0) / (len(route) - 1))
    for proc in procs:
        proc.join(10)
    first.close(0)
    pull.close(0)
    ctx.term()
    return median_us(samples)


HOP10_2RANK_ROUTE = ["client", "conductor", *["r0", "r1"] * 5, "conductor", "client"]


# ------------------------------------------------------------------------- the runtime


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of every thread of ``pids`` so far (Linux ``/proc/<pid>/task/*/schedstat``,
    nanosecond resolution; 0 elsewhere)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    return total / 1e9


def request_latency(plan: str, n: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(median request latency, CPU time of the runtime's processes per request), both in µs;
    ``env``: tuning variables for the spawned processes (`wgc_runtime.host.transport.tuning`)."""
    import torch

    from wgc_runtime.host.client import Client
    from wgc_runtime.host.processes.launcher import Cluster

    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        x = torch.zeros(4)
        with Cluster(plan, progress=None) as cluster, Client(cluster.client_address) as client:
            pids = list(cluster.pids.values())
            samples = []
            for i in range(n + 20):
                if i == 20:
                    cpu0 = cpu_seconds(pids)
                t0 = time.perf_counter()
                outs = client.run([("x", x)], ["tensor"], deadline=30)
                dt = time.perf_counter() - t0
                assert len(outs) == 1
                if i >= 20:
                    samples.append(dt)
            cpu = (cpu_seconds(pids) - cpu0) / n * 1e6
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return median_us(samples), cpu


def output_times(plan: str, n: int, env: dict[str, str]) -> tuple[float, float, float]:
    """(median latency to the request's first output, median latency to its end, CPU time of
    the runtime's processes per request), all in µs, under ``env`` (`request_latency`)."""
    import torch

    from wgc_runtime.host.client import Client
    from wgc_runtime.host.processes.launcher import Cluster

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        x = torch.zeros(4)
        with Cluster(plan, progress=None) as cluster, Client(cluster.client_address) as client:
            pids = list(cluster.pids.values())
            firsts, ends = [], []
            for i in range(n + 20):
                if i == 20:
                    cpu0 = cpu_seconds(pids)
                t0 = time.perf_counter()
                it = iter(client.submit([("x", x)], ["tensor"], deadline=30))
                next(it)
                t1 = time.perf_counter()
                assert not list(it)
                t2 = time.perf_counter()
                if i >= 20:
                    firsts.append(t1 - t0)
                    ends.append(t2 - t0)
            cpu = (cpu_seconds(pids) - cpu0) / n * 1e6
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return median_us(firsts), median_us(ends), cpu


OUTPUTS = {"relay": {"WGC_DIRECT_OUT": "0"}, "direct": {"WGC_DIRECT_OUT": "1"}}


def outputs_pairs(plans: dict[str, str], n: int, rounds: int) -> list[str]:
    """Outputs straight from the producing rank to the client (`WGC_DIRECT_OUT=1`) against
    through the conductor (``0``), paired in ``rounds`` interleaved rounds: chain3 and hop10 on 2
    ranks, latency to the output, to the request's end, CPU. The table's rows, as markdown."""
    res: dict[str, list[float]] = {}
    load0 = loadavg()
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}, load {loadavg()}", flush=True)
        order = list(OUTPUTS.items()) if r % 2 == 0 else list(OUTPUTS.items())[::-1]
        for name, env in order:
            for plan in ("chain3-3rank", "hop10-2rank"):
                first, end, cpu = output_times(plans[plan], n, env)
                for what, v in (("first", first), ("end", end), ("cpu", cpu)):
                    res.setdefault(f"{plan} {what} {name}", []).append(v)
                print(
                    f"  {name:7s} {plan:14s} output {first:7.1f} us, end {end:7.1f} us, "
                    f"{cpu:.0f} us CPU",
                    flush=True,
                )
    load1 = loadavg()

    def row(label: str, key: str) -> str:
        cells = " | ".join(spread(res[f"{key} {name}"]) + " µs" for name in OUTPUTS)
        pairs = zip(res[f"{key} relay"], res[f"{key} direct"], strict=True)
        return f"| {label} | {cells} | {spread([a / b for a, b in pairs], '{:.2f}')}× |"

    rows = [
        f"| measurement (median of {rounds} rounds of {n} requests, min–max) | through the "
        "conductor (`WGC_DIRECT_OUT=0`) | direct (`WGC_DIRECT_OUT=1`) | relay ÷ direct |",
        "|---|---|---|---|",
        f"| load (1, 5, 15 min) before → after | {load0} → {load1} | | |",
    ]
    for plan, label in (("chain3-3rank", "chain3 (3 ranks)"), ("hop10-2rank", "hop10 (2 ranks)")):
        rows += [
            row(f"{label}: latency to the output", f"{plan} first"),
            row(f"{label}: latency to the request's end", f"{plan} end"),
            row(f"{label}: CPU of every runtime thread per request", f"{plan} cpu"),
        ]
    return rows


def local_latency(plan: str, n: int, direct: bool = True) -> float:
    import torch

    from wgc_runtime.contract.flow import Segment
    from wgc_runtime.host.local import LocalCluster

    cluster = LocalCluster(plan, direct=direct)
    samples = []
    for i in range(n + 20):
        req = cluster.request([Segment("x", torch.zeros(4))], ["tensor"])
        t0 = time.perf_counter()
        h = cluster.submit(req).result()
        dt = time.perf_counter() - t0
        assert h.ok
        if i >= 20:
            samples.append(dt)
    return median_us(samples)


def direct_call_us(n: int = 20000) -> float:
    import torch

    from benchmarks.noop import Noop
    from wgc_runtime.contract.node import CallContext, NodeContext, Work

    node = Noop(NodeContext(name="n0"))
    work = [Work({"x": torch.zeros(4)}, CallContext(request_id="r", walk="chain", call=0))]
    t0 = time.perf_counter()
    for _ in range(n):
        node.forward(work)
    return (time.perf_counter() - t0) / n * 1e6


# ------------------------------------------------------------------------- 16 MiB hand-over


def _receiver(boot: dict, mode: str, n: int) -> None:
    from wgc_runtime.contract import control as c
    from wgc_runtime.contract import messages as m
    from wgc_runtime.host.transport.arena import Arena
    from wgc_runtime.host.transport.sockets import Mesh

    a = boot["arena"]
    arena = Arena.attach(a["name"], a["slots"], a["region"], slot=1) if mode == "arena" else None
    mesh = Mesh(1, arena=arena, secret=boot["secret"])
    mesh.connect(0, boot["sender"])
    mesh.send(0, [c.Hello(1, mesh.address)])
    got = 0
    while got < n:
        batch = mesh.poll(1000)
        while batch:
            value = batch.pop(0).data
            assert value.numel() * value.element_size() == 16 << 20
            del value  # the last view: its arena block is released (as a worker does)
            mesh.flush_releases()
            mesh.send(0, [m.StreamAck("bench", "h", got, 1)])
            got += 1
    time.sleep(0.2)
    mesh.close()
    if arena is not None:
        arena.close()


def hand_over(mode: str, n: int) -> float:
    """Median round trip (send 16 MiB, receive a small ack) in microseconds."""
    import torch

    from wgc_runtime.contract import messages as m
    from wgc_runtime.contract.kinds import Edge
    from wgc_runtime.host.transport.arena import Arena
    from wgc_runtime.host.transport.codec import Codec
    from wgc_runtime.host.transport.sockets import Mesh

    owner = Arena.create(slots=2, region=64 << 20, tag="bench")
    try:
        arena = Arena.attach(owner.name, 2, owner.region, slot=0) if mode == "arena" else None
        mesh = Mesh(0, arena=arena)
        boot = {"arena": owner.spec(), "sender": mesh.address, "secret": mesh.secret}
        proc = multiprocessing.get_context("spawn").Process(
            target=_receiver, args=(boot, mode, n + 5)
        )
        proc.start()
        hello = mesh.recv(60)
        assert hello is not None
        mesh.connect(1, hello.address)
        tensor = torch.randn(4 << 20)  # 16 MiB of f32
        samples = []
        for i in range(n + 5):
            tensor.add_(1.0)  # a new value every time: the arena writes it (no cache hit)
            t0 = time.perf_counter()
            msg = m.Value("bench", 1, "hand-over", 0, "x", Edge.INPUT, data=tensor)
            if mode == "zmq-copy":  # the tensor's bytes copied into the ZeroMQ message
                frames = Codec().encode([msg])
                copied = [mesh.secret, *(bytes(f) for f in frames)]  # the secret first, as Mesh
                mesh._socket(1).send_multipart(copied, copy=True)
                ack = mesh.recv(30)
            else:
                mesh.send(1, [msg])
                ack = mesh.recv(30)
            dt = time.perf_counter() - t0
            assert ack is not None
            if i >= 5:
                samples.append(dt)
        proc.join(30)
        mesh.poll(100)  # the last releases
        mesh.close()
        if arena is not None:
            assert arena.live_blocks == 0, "arena blocks not released"
            arena.close()
        return median_us(samples)
    finally:
        owner.close()


# ------------------------------------------------------------------------- ray


def ray_chain3(n: int) -> float | None:
    try:
        import ray
        from ray.dag import InputNode
    except ImportError:
        return None

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)

    @ray.remote
    class Stage:
        def run(self, x):
            return x

    a, b, c = Stage.remote(), Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = c.run.bind(b.run.bind(a.run.bind(inp)))
    compiled = dag.experimental_compile()
    import numpy as np

    x = np.zeros(4, dtype=np.float32)
    samples = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        ray.get(compiled.execute(x))
        if i >= 20:
            samples.append(time.perf_counter() - t0)
    compiled.teardown()
    ray.shutdown()
    return median_us(samples)


def ray_serve(n: int) -> None:
    """``--ray-serve``: compile the Ray chain once, warm it, then answer one line per block
    asked for on stdin (the median of ``n`` requests, µs): the parent interleaves these blocks
    with wgc's, so Ray is never measured right after ``ray.init``."""
    import numpy as np
    import ray
    from ray.dag import InputNode

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)

    @ray.remote
    class Stage:
        def run(self, x):
            return x

    a, b, c = Stage.remote(), Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = c.run.bind(b.run.bind(a.run.bind(inp)))
    compiled = dag.experimental_compile()
    x = np.zeros(4, dtype=np.float32)
    for _ in range(200):
        ray.get(compiled.execute(x))
    print("ready", flush=True)
    for _line in sys.stdin:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            ray.get(compiled.execute(x))
            samples.append(time.perf_counter() - t0)
        print(f"{median_us(samples):.2f}", flush=True)
    compiled.teardown()
    ray.shutdown()


class RayBlocks:
    """A Ray Compiled Graph chain kept warm in another Python (one that has ``ray``)."""

    def __init__(self, python: str, n: int) -> None:
        import subprocess

        cmd = [python, __file__, "--ray-serve", "--requests", str(n)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                return
        raise SystemExit("the Ray chain did not start (is ray installed in that Python?)")

    def block(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


TRANSPORTS = {"zmq": {"WGC_RING": "0"}, "ring": {"WGC_RING": "1"}}
SIDE_PLANS = ("hop10-1rank", "hop10-2rank", "dispatch100-1rank", "chain3-3rank")


def side_by_side(
    plans: dict[str, str], n: int, rounds: int, ray_python: str | None
) -> dict[str, list[float]]:
    """Every served measurement for both same-host transports (ZeroMQ, rings) and the raw
    baselines, ``rounds`` interleaved rounds, with a block of the warm Ray chain in each:
    ``{key: [one value per round]}``."""
    ray = RayBlocks(ray_python, n) if ray_python else None
    out: dict[str, list[float]] = {}
    try:
        for r in range(rounds):
            print(f"round {r + 1}/{rounds}, load {loadavg()}", flush=True)
            out.setdefault("raw tcp", []).append(raw_zmq_one_way(2000))
            out.setdefault("raw ipc", []).append(raw_zmq_one_way(2000, "ipc"))
            out.setdefault("raw ring", []).append(raw_ring_one_way(2000))
            for name, env in TRANSPORTS.items():
                for plan in SIDE_PLANS:
                    lat, cpu = request_latency(plans[plan], n, env)
                    out.setdefault(f"{plan} {name}", []).append(lat)
                    out.setdefault(f"{plan} {name} cpu", []).append(cpu)
                    print(f"  {name:5s} {plan:18s} {lat:8.1f} us ({cpu:.0f} us CPU)", flush=True)
            if ray is not None:
                out.setdefault("ray", []).append(ray.block())
                print(f"  ray chain3 {out['ray'][-1]:8.1f} us", flush=True)
    finally:
        if ray is not None:
            ray.close()
    return out


DISPATCH = {"generic": {"WGC_DIRECT": "0"}, "generated": {"WGC_DIRECT": "1"}}


def dispatch_pairs(plans: dict[str, str], n: int, rounds: int) -> list[str]:
    """Generated dispatch (`wgc_runtime.core.executor.direct`) against the generic executor
    (``WGC_DIRECT=0``, ``LocalCluster(direct=False)``), paired in ``rounds`` interleaved rounds
    on the default transport: same-rank dispatch per node (dispatch100, in `LocalCluster` and
    in a worker, minus a direct call) and the request latency of chain3 and hop10 on 1 rank.
    The table's rows, as markdown."""
    res: dict[str, list[float]] = {}
    calls: list[float] = []
    load0 = loadavg()
    for r in range(rounds):
        print(f"round {r + 1}/{rounds}, load {loadavg()}", flush=True)
        direct = direct_call_us()  # this round's, as the load is now
        calls.append(direct)
        for name, env in DISPATCH.items():
            local = local_latency(plans["dispatch100-1rank"], n, env["WGC_DIRECT"] == "1")
            res.setdefault(f"local {name}", []).append(local / 100 - direct)
            for plan in ("dispatch100-1rank", "chain3-3rank", "hop10-1rank"):
                lat, cpu = request_latency(plans[plan], n, env)
                res.setdefault(f"{plan} {name}", []).append(lat)
                res.setdefault(f"{plan} cpu {name}", []).append(cpu)
                print(f"  {name:9s} {plan:18s} {lat:8.1f} us ({cpu:.0f} us CPU)", flush=True)
            res.setdefault(f"worker {name}", []).append(
                res[f"dispatch100-1rank {name}"][-1] / 100 - direct
            )
            # the 90 nodes dispatch100 has beyond hop10 on one rank: fixed costs cancel
            for what in ("", " cpu"):
                more = res[f"dispatch100-1rank{what} {name}"][-1]
                more -= res[f"hop10-1rank{what} {name}"][-1]
                res.setdefault(f"marginal{what} {name}", []).append(more / 90)
    load1 = loadavg()

    def cells(key: str, fmt: str = "{:.0f}") -> str:
        return " | ".join(spread(res[f"{key} {name}"], fmt) + " µs" for name in DISPATCH)

    def ratio(key: str) -> str:
        pairs = zip(res[f"{key} generic"], res[f"{key} generated"], strict=True)
        return spread([g / d for g, d in pairs], "{:.1f}") + "×"

    def row(label: str, key: str, goal: str = "", fmt: str = "{:.0f}") -> str:
        return f"| {label} | {cells(key, fmt)} | {ratio(key)} | {goal} |"

    return [
        f"| measurement (median of {rounds} rounds, min–max) | generic executor "
        "(`WGC_DIRECT=0`) | generated dispatch (`WGC_DIRECT=1`) | generic ÷ generated | goal |",
        "|---|---|---|---|---|",
        f"| load (1, 5, 15 min) before → after | {load0} → {load1} | | | |",
        f"| direct call of the no-op node's `forward` (subtracted below, per round) "
        f"| {spread(calls, '{:.2f}')} µs | | | |",
        row(
            "same-rank dispatch per node, `LocalCluster` − direct call",
            "local",
            "≤ 10 µs",
            "{:.1f}",
        ),
        row("same-rank dispatch per node, worker − direct call", "worker", "≤ 10 µs", "{:.1f}"),
        row("marginal node, worker ((dispatch100 − hop10 1 rank) / 90)", "marginal", "", "{:.1f}"),
        row("marginal node, worker, CPU of every runtime thread", "marginal cpu", "", "{:.1f}"),
        row("dispatch100 (1 rank) request latency", "dispatch100-1rank"),
        row("hop10, 1 rank, request latency", "hop10-1rank"),
        row("chain3 (3 ranks) request latency", "chain3-3rank"),
        row("chain3, CPU of every runtime thread per request", "chain3-3rank cpu"),
    ]


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """``median (min–max)`` of one value per round."""
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


# ------------------------------------------------------------------------- main


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def hops(plans: dict[str, str], n: int, repeat: int, busy: list[float]) -> None:
    """The cross-rank hop side by side with its baselines, ``repeat`` interleaved rounds, best
    (lowest median) of each; every busy-poll window in ``busy`` (µs) is a configuration."""
    configs = [("1rank", "hop10-1rank", 0.0)] + [("2rank", "hop10-2rank", b) for b in busy]
    configs += [("1rank-busy", "hop10-1rank", b) for b in busy if b]
    best: dict[str, tuple[float, float]] = {}
    raws: dict[str, float] = {}
    for r in range(repeat):
        print(f"round {r + 1}/{repeat}, load {loadavg()}", flush=True)
        for transport in ("tcp", "ipc"):
            raws[transport] = min(raws.get(transport, 1e18), raw_zmq_one_way(2000, transport))
        for label, plan, b in configs:
            key = f"{label} busy={b:g}"
            env = {"WGC_BUSY_POLL_US": str(b)}
            lat, cpu = request_latency(plans[plan], n, env)
            print(f"  {key:24s} {lat:8.1f} us/request, {cpu:8.1f} us CPU/request", flush=True)
            if key not in best or lat < best[key][0]:
                best[key] = (lat, cpu)
    raw = raws["tcp"]
    print(f"load after: {loadavg()}")
    print(f"raw pyzmq one-way hop, tcp:  {raws['tcp']:8.1f} us")
    print(f"raw pyzmq one-way hop, ipc:  {raws['ipc']:8.1f} us")
    for key, (lat, cpu) in best.items():
        print(f"{key:24s} {lat:8.1f} us/request, {cpu:8.1f} us CPU/request")
    for b in busy:
        lat2 = best[f"2rank busy={b:g}"][0]
        lat1 = best[f"1rank-busy busy={b:g}" if b else "1rank busy=0"][0]
        per_hop, marginal = lat2 / 13, (lat2 - lat1) / 9
        print(
            f"busy={b:g}: per process hop {per_hop:.1f} us ({per_hop / raw:.2f}x tcp raw), "
            f"marginal cross-rank hop {marginal:.1f} us ({marginal / raw:.2f}x tcp raw, "
            f"{marginal / raws['ipc']:.2f}x ipc raw)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds, side by side")
    ap.add_argument(
        "--ray-python",
        default=os.environ.get("WGC_RAY_PYTHON") or None,
        help="a Python that has ray: its chain runs interleaved (default: $WGC_RAY_PYTHON)",
    )
    ap.add_argument("--ray-only", action="store_true")
    ap.add_argument("--ray-serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--hops-only", action="store_true", help="only the cross-rank hop, best of")
    ap.add_argument(
        "--dispatch-only",
        action="store_true",
        help="only generated dispatch against the generic executor, paired rounds",
    )
    ap.add_argument(
        "--outputs-only",
        action="store_true",
        help="only direct outputs against outputs through the conductor, paired rounds",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds for --hops-only")
    ap.add_argument(
        "--busy", type=float, nargs="*", default=[0.0], help="busy-poll windows (us) to compare"
    )
    ap.add_argument(
        "--markdown", type=Path, help="write the full run's table there (benchmarks/all.py)"
    )
    args = ap.parse_args()
    n = args.requests
    if args.ray_serve:
        ray_serve(n)
        return
    if args.ray_only:
        r = ray_chain3(n)
        print(f"ray compiled graph, 3-stage chain: {r:.1f} us per request" if r else "no ray")
        return
    tmp = Path(tempfile.mkdtemp(prefix="wgc-bench-"))
    plans = compile_all(tmp)
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, load {loadavg()}")
    if args.hops_only:
        hops(plans, n, args.repeat, args.busy)
        return
    if args.outputs_only:
        print("\n".join(outputs_pairs(plans, n, args.rounds)))
        return
    if args.dispatch_only:
        table = dispatch_pairs(plans, n, args.rounds)
        print("\n".join(table))
        if args.markdown:
            args.markdown.write_text("\n".join(table) + "\n")
        return

    load0 = loadavg()
    raw_topo = raw_route(HOP10_2RANK_ROUTE, 500)
    res = side_by_side(plans, n, args.rounds, args.ray_python)
    direct = direct_call_us()
    local100 = local_latency(plans["dispatch100-1rank"], n)
    handed = [(mode, hand_over(mode, 30)) for mode in ("arena", "zmq-frames", "zmq-copy")]
    load1 = loadavg()
    raw, raw_ipc = res["raw tcp"], res["raw ipc"]
    rows = [
        ("load (1, 5, 15 min) before → after", f"{load0} → {load1}", "", ""),
        (
            "raw pyzmq one-way hop, tcp / ipc (baselines)",
            spread(raw, "{:.1f}") + " / " + spread(raw_ipc, "{:.1f}") + " µs",
            "",
            "",
        ),
        ("raw pyzmq, hop10-2rank route, per hop (baseline)", f"{raw_topo:.1f} µs", "", ""),
        (
            "raw one-way hop through the rings, no runtime (their floor)",
            "",
            spread(res["raw ring"], "{:.1f}") + " µs",
            "",
        ),
    ]

    def both(label: str, fn, goal: str, fmt: str = "{:.0f}", unit: str = " µs") -> None:
        cells = []
        for name in TRANSPORTS:
            values = [fn(name, i) for i in range(args.rounds)]
            cells.append(spread(values, fmt) + unit)
        rows.append((label, cells[0], cells[1], goal))

    def lat(plan: str, name: str, i: int) -> float:
        return res[f"{plan} {name}"][i]

    both("hop10, 2 ranks, request latency", lambda t, i: lat("hop10-2rank", t, i), "")
    both("hop10, 1 rank, request latency", lambda t, i: lat("hop10-1rank", t, i), "")
    both(
        "marginal cross-rank hop ((2 ranks − 1 rank) / 9)",
        lambda t, i: (lat("hop10-2rank", t, i) - lat("hop10-1rank", t, i)) / 9,
        "",
    )
    both(
        "marginal cross-rank hop ÷ raw pyzmq ipc one-way (same round)",
        lambda t, i: (lat("hop10-2rank", t, i) - lat("hop10-1rank", t, i)) / 9 / raw_ipc[i],
        "≤ 1×",
        "{:.2f}",
        "×",
    )
    rows.append(
        (
            "same-rank dispatch per node, executor (`LocalCluster`) − direct call",
            f"{local100 / 100 - direct:.1f} µs",
            "(no transport)",
            "≤ 10 µs",
        )
    )
    both(
        "same-rank dispatch per node, worker process − direct call",
        lambda t, i: lat("dispatch100-1rank", t, i) / 100 - direct,
        "≤ 10 µs",
        "{:.1f}",
    )
    both("chain3 (3 ranks) request latency, wgc", lambda t, i: lat("chain3-3rank", t, i), "")
    both(
        "chain3, CPU of every runtime thread per request",
        lambda t, i: res[f"chain3-3rank {t} cpu"][i],
        "",
    )
    if "ray" in res:
        rays = res["ray"]
        rows.append(
            (
                "chain3 as a Ray Compiled Graph (warm, interleaved blocks)",
                spread(rays) + " µs",
                "",
                "",
            )
        )
        both(
            "wgc chain3 speed ÷ Ray's (same round)",
            lambda t, i: rays[i] / lat("chain3-3rank", t, i),
            "≥ 5×",
            "{:.2f}",
            "×",
        )
    else:
        rows.append(("chain3 as a Ray Compiled Graph", "no `--ray-python` given", "", "≥ 5×"))
    for mode, t in handed:
        rows.append((f"16 MiB hand-over, {mode}, round trip", f"{t / 1000:.2f} ms", "", ""))
    lines = [
        f"| measurement (median of {args.rounds} rounds, min–max) | ZeroMQ (`WGC_RING=0`) "
        "| rings (`WGC_RING=1`) | goal |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
