"""The runtime's hot path, per request: messages, latency and CPU, served and in-process.

    .venv/bin/python benchmarks/hot_path.py [--requests 60] [--repeat 3] [--json out.json]
    # A/B: the same script against another checkout, interleaved in one run
    .venv/bin/python benchmarks/hot_path.py --against /work/base

Per workload, at concurrency 1 (``benchmarks/models``: ``tts.walk``, Orpheus's structure with
no-op compute — an LM decoding 35 tokens streamed in sliding(28, 7) windows to a vocoder — on 1
rank and split over 2 like Orpheus cpu-2rank; ``chain3.walk`` on 3 ranks; ``hop10.walk`` on 2):

* **messages per request**: every message the cores exchange for one request
  (`LocalCluster.log`: conductor <-> ranks, rank <-> rank, to the client), by type;
* **served latency**: p50 of ``--requests`` sequential requests through `Cluster` + `Client`
  (the processes `wgc run --serve` starts), after 5 warm-up requests;
* **in-process latency**: the same through `LocalCluster` (no transport: what `--local` runs);
* **CPU per request**: of the conductor process and of all the workers (``/proc`` schedstat).

``--against DIR`` runs the same measurements with ``DIR``'s compiler and runtime (a child
Python of ``DIR/.venv``, compiling this file's models with its own compiler), alternating
rounds, and prints both side by side with their ratios. The machine load is printed before
and after each round; medians over ``--repeat`` rounds, and the spread (min-max).
``--this-env`` / ``--against-env KEY=VALUE`` set environment variables for one side (with
``--against .``: one checkout under two settings, e.g. ``WGC_BUSY_POLL_US=0``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

MODELS = "benchmarks/models"
WORKLOADS = {
    # name: (walk, placement), under benchmarks/models
    "tts-1rank": ("tts.walk", "placements/tts-1rank.yaml"),
    "tts-2rank": ("tts.walk", "placements/tts-2rank.yaml"),
    "chain3-3rank": ("chain3.walk", "placements/chain3-3rank.yaml"),
    "hop10-2rank": ("hop10.walk", "placements/hop10-2rank.yaml"),
}


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of every thread of ``pids`` so far (Linux ``schedstat``; 0 elsewhere)."""
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


def _inputs(name: str):
    import torch

    if name.startswith("tts"):
        return [("text", "hello there")], ["audio"]
    return [("x", torch.zeros(4))], ["tensor"]


def _compile(walk: str, placement: str, out: Path) -> Path:
    from wgc.driver import Driver

    result = Driver().compile(f"{MODELS}/{walk}", f"{MODELS}/{placement}")
    if not result.ok:
        raise SystemExit("\n".join(d.message for d in result.errors))
    out.mkdir(parents=True, exist_ok=True)
    for name, text in result.files.items():
        (out / name).write_text(text)
    return out


def measure(n: int) -> dict:
    """One round of every workload with the `wgc` and `wgc_runtime` this Python imports. The
    models and their no-op nodes are this file's (`benchmarks/models`, `benchmarks/noop.py`),
    copied to a scratch folder, so two checkouts run the same workloads."""
    import torch

    from wgc_runtime.contract.flow import Segment
    from wgc_runtime.host.client import Client
    from wgc_runtime.host.local import LocalCluster
    from wgc_runtime.host.processes.launcher import Cluster

    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(HERE / MODELS, work / MODELS)
        shutil.copy(HERE / "benchmarks" / "noop.py", work / "benchmarks" / "noop.py")
        (work / "benchmarks" / "__init__.py").write_text("")
        os.chdir(work)  # node impl paths (`benchmarks.noop:...`) resolve from here
        sys.path.insert(0, str(work))
        for name, (walk, placement) in WORKLOADS.items():
            folder = _compile(walk, placement, work / "plans" / name)
            inputs, want = _inputs(name)
            local = LocalCluster(folder)
            segs = [Segment(m, v) for m, v in inputs]
            local.submit(local.request(segs, want)).result()
            local.log = []
            local.submit(local.request(segs, want)).result()
            counts = collections.Counter(type(m).__name__ for _, m in local.log)
            local.log = None
            t_local = []
            for _ in range(n):
                t0 = time.perf_counter()
                assert local.submit(local.request(segs, want)).result().ok
                t_local.append(time.perf_counter() - t0)
            with (
                Cluster(str(folder), progress=None) as cluster,
                Client(cluster.client_address) as client,
            ):
                pids = dict(cluster.pids)
                for _ in range(5):
                    client.run(inputs, want, deadline=60)
                c0 = {k: cpu_seconds([p]) for k, p in pids.items()}
                t_served = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    client.run(inputs, want, deadline=60)
                    t_served.append(time.perf_counter() - t0)
                cpu = {k: (cpu_seconds([p]) - c0[k]) / n for k, p in pids.items()}
            out[name] = {
                "messages": sum(counts.values()),
                "by_type": dict(counts),
                "served_p50_us": statistics.median(t_served) * 1e6,
                "local_p50_us": statistics.median(t_local) * 1e6,
                "conductor_cpu_us": cpu.get("conductor", 0.0) * 1e6,
                "workers_cpu_us": sum(v for k, v in cpu.items() if k != "conductor") * 1e6,
            }
    return out


def _child(root: Path, n: int, env: list[str]) -> dict:
    """`measure` in a fresh Python of ``root``'s venv (its `wgc` and `wgc_runtime`), with the
    ``KEY=VALUE`` settings of ``env`` in its environment (its workers inherit them)."""
    code = (
        "import json, sys, importlib.util; from pathlib import Path;"
        "spec = importlib.util.spec_from_file_location('hot_path', sys.argv[3]);"
        "hp = importlib.util.module_from_spec(spec); spec.loader.exec_module(hp);"
        "print('RESULT ' + json.dumps(hp.measure(int(sys.argv[2]))))"
    )
    venv = root / ".venv" / "bin" / "python"
    python = str(venv if venv.exists() else sys.executable)
    proc = subprocess.run(
        [python, "-c", code, str(root), str(n), __file__],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **dict(kv.split("=", 1) for kv in env)},
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{root}: measurement failed:\n{proc.stderr[-3000:]}")


def _median(rounds: list[dict], name: str, key: str) -> tuple[float, float, float]:
    vals = [r[name][key] for r in rounds]
    return statistics.median(vals), min(vals), max(vals)


def report(sides: dict[str, list[dict]]) -> str:
    labels = list(sides)
    keys = ["served_p50_us", "local_p50_us", "conductor_cpu_us", "workers_cpu_us"]
    head = "| workload | measure | " + " | ".join(labels)
    if len(labels) == 2:
        head += f" | {labels[0]} / {labels[1]}"
    lines = [head + " |", "|" + " --- |" * (2 + len(labels) + (len(labels) == 2))]
    for name in WORKLOADS:
        msgs = [str(sides[s][0][name]["messages"]) for s in labels]
        lines.append(
            f"| {name} | messages / request | "
            + " | ".join(msgs)
            + (" | |" if len(labels) == 2 else " |")
        )
        for key in keys:
            cells, meds = [], []
            for s in labels:
                med, lo, hi = _median(sides[s], name, key)
                meds.append(med)
                cells.append(f"{med:,.0f} ({lo:,.0f}-{hi:,.0f})")
            ratio = f" | {meds[0] / meds[1]:.2f}" if len(labels) == 2 and meds[1] else ""
            lines.append(
                f"| {name} | {key.replace('_', ' ')} | " + " | ".join(cells) + ratio + " |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", type=Path)
    ap.add_argument("--json", type=Path)
    # e.g. `--against . --against-env WGC_BUSY_POLL_US=0`: one checkout, two settings
    ap.add_argument("--this-env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--against-env", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    sides: dict[str, list[dict]] = {"this": []}
    if args.against:
        sides["against"] = []
    for r in range(args.repeat):
        print(f"round {r + 1}/{args.repeat}: load {loadavg()}", flush=True)
        sides["this"].append(_child(HERE, args.requests, args.this_env))
        if args.against:
            against = _child(args.against.resolve(), args.requests, args.against_env)
            sides["against"].append(against)
        print(f"  load {loadavg()}", flush=True)
    for s, rounds in sides.items():
        print(
            f"{s}: messages by type: " + json.dumps({k: v["by_type"] for k, v in rounds[0].items()})
        )
    print(report(sides))
    if args.json:
        args.json.write_text(json.dumps(sides, indent=2))


if __name__ == "__main__":
    main()
