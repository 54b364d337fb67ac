"""The decoder served through the compiled path vs the same engines driven directly.

    .venv/bin/python benchmarks/served_decode.py [--configs tiny small] [--new 64]
        [--concurrency 16] [--repeat 3] [--threads 2] [--json out.json]

The model is `wgc_models/llama` (a `LlamaDecoder`, seeded random weights, ``eos = -1`` so every
request runs its full length), compiled with `wgc_models/llama/placements/cpu.yaml` (1 CPU rank,
``max_batch`` 16, capture buckets 1-16, eager backend) and ``--set`` sizes per config. Sides,
interleaved ``--repeat`` times:

* **served**: `Cluster` (the conductor and one worker process, as `wgc run --serve` starts
  them) and a `Client`; ``--concurrency`` requests submitted at once, each a text prompt,
  collected; the executor batches the decode loop across requests (continuous batching) and
  runs the decode step as the plan's captured unit;
* **direct**: in this process, the same weights (`wgc_models.llama.nodes.build_model`) in a
  `DecoderEngine` over a `PagedKVPool` of the same size, driven by a `ContinuousBatcher`
  (capture path, eager, the same buckets) with the same requests;
* **served, one at a time**: the served deployment with the same requests submitted one after
  another (each waits for the previous one).

Every side does the same model work per request: a prefill of the prompt and ``--new`` decode
steps (the walk's loop runs ``max_new_tokens`` steps after the prefill's token; the batcher is
asked for ``--new + 1`` tokens). Tokens/s counts those ``--new + 1`` tokens per request.
Worker start (loading, capture) is outside the timings, like the batcher's construction.
Reported per config: tokens/s of each side (median and best of the repeats), served/direct
(goal ≥ 0.90: the runtime's overhead ≤ 10%), requests/s at ``--concurrency`` vs one at a time
(goal ≥ 4×), the same two ratios in CPU seconds of every process involved (the client, the
conductor and the worker for the served sides: on a shared machine CPU time is far steadier than
wall time), whether the served tokens equal the direct ones, and the machine load before and
after. Both sides use ``--threads`` intra-op threads (the worker through ``OMP_NUM_THREADS``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hot_path import cpu_seconds, loadavg  # noqa: E402

CONFIGS = {
    # the example's own sizes: a step is a few dozen tiny ops (per-op overhead dominates)
    "tiny": {},
    # matrix products take most of a step
    "small": {
        "vocab": "2048",
        "hidden": "256",
        "intermediate": "512",
        "layers": "4",
        "heads": "8",
        "kv_heads": "4",
        "head_dim": "32",
    },
    # a step of tens of milliseconds on one core, like a real model's share of a GPU step
    "medium": {
        "vocab": "4096",
        "hidden": "512",
        "intermediate": "1408",
        "layers": "8",
        "heads": "8",
        "kv_heads": "4",
        "head_dim": "64",
    },
}
WALK = ROOT / "wgc_models" / "llama" / "llama.walk"
PLACEMENT = ROOT / "wgc_models" / "llama" / "placements" / "cpu.yaml"


def prompts(n: int) -> list[str]:
    return [f"request {i}: tell me something about the number {i * 7}" for i in range(n)]


def compile_plan(sets: dict[str, str], out: Path):
    from wgc.driver import Driver

    result = Driver().compile(str(WALK), str(PLACEMENT), sets)
    if not result.ok:
        raise SystemExit("\n".join(d.message for d in result.errors))
    for name, text in result.files.items():
        (out / name).write_text(text)
    assert result.plan is not None
    return result.plan


def node_config(plan) -> dict:
    [rank] = plan.ranks
    [node] = [n for n in rank.nodes if n.name == "LLM"]
    return dict(node.config)


class Direct:
    """The same weights and engines in this process: `DecoderEngine` + `ContinuousBatcher`."""

    def __init__(self, config: dict, pages: int, buckets: list[int], max_batch: int) -> None:
        from wgc_models.layers.decode_engine import DecoderEngine
        from wgc_models.llama.nodes import build_model
        from wgc_runtime.engines.batching import ContinuousBatcher

        self.engine = DecoderEngine.build(build_model(config, "cpu"), pages=pages, page_size=16)
        self.batcher = ContinuousBatcher(
            self.engine,
            max_batch=max_batch,
            max_seq_len=int(config["kv_tokens"]),
            capture=True,
            buckets=buckets,
            graph_backend="eager",
        )
        self.n = 0

    def run(self, texts: list[str], new: int) -> list[list[int]]:
        import torch

        from wgc_runtime.engines.batching import GenRequest

        reqs = []
        for t in texts:
            self.n += 1
            prompt = torch.tensor(list(t.encode()), dtype=torch.long)
            reqs.append(GenRequest(f"r{self.n}", prompt, max_new_tokens=new + 1))
        self.batcher.run(reqs)
        return [r.tokens for r in reqs]


def served(client, texts: list[str], at_once: bool) -> list[list[int]]:
    if at_once:
        streams = [client.submit([("text", t)], ["text"], deadline=600) for t in texts]
        outs = [s.collect() for s in streams]
    else:
        outs = [client.submit([("text", t)], ["text"], deadline=600).collect() for t in texts]
    return [[int(o.value) for o in out] for out in outs]


def bench(name: str, args, tmp: Path) -> dict:
    import torch

    from wgc_runtime.host.client import Client
    from wgc_runtime.host.processes.launcher import Cluster

    sets = {**CONFIGS[name], "eos": "-1", "max_new_tokens": str(args.new)}
    sets["kv_tokens"] = str(args.new + 96)
    folder = tmp / name
    folder.mkdir()
    plan = compile_plan(sets, folder)
    config = node_config(plan)
    texts = prompts(args.concurrency)
    buckets = list(plan.batching.capture)
    direct = Direct(config, plan.kv_cache.pages, buckets, plan.batching.max_batch)
    direct.run(texts[:2], 4)  # warm-up
    per_request = args.new + 1
    times: dict[str, list[float]] = {"served": [], "direct": [], "sequential": []}
    cpu: dict[str, list[float]] = {"served": [], "direct": [], "sequential": []}
    same = True
    load_before = loadavg()
    with Cluster(str(folder), progress=None) as cluster, Client(cluster.client_address) as client:
        pids = [os.getpid(), *cluster.pids.values()]  # client, conductor, worker
        served(client, texts[:2], True)  # warm-up
        for _ in range(args.repeat):
            c0, t0 = cpu_seconds(pids), time.perf_counter()
            got = served(client, texts, True)
            times["served"].append(time.perf_counter() - t0)
            cpu["served"].append(cpu_seconds(pids) - c0)
            c0, t0 = cpu_seconds([os.getpid()]), time.perf_counter()
            want = direct.run(texts, args.new)
            times["direct"].append(time.perf_counter() - t0)
            cpu["direct"].append(cpu_seconds([os.getpid()]) - c0)
            # the walk emits the prefill's token and the tokens of all but the last step
            same = same and all(g == w[: len(g)] for g, w in zip(got, want, strict=True))
            same = same and all(len(g) == args.new for g in got)
            c0, t0 = cpu_seconds(pids), time.perf_counter()
            served(client, texts, False)
            times["sequential"].append(time.perf_counter() - t0)
            cpu["sequential"].append(cpu_seconds(pids) - c0)
    tokens = per_request * len(texts)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    row = {
        "config": name,
        "threads": torch.get_num_threads(),
        "load": f"{load_before} -> {loadavg()}",
        "requests": len(texts),
        "tokens_per_request": per_request,
        "tok_s_median": {k: tokens / v for k, v in med.items()},
        "tok_s_best": {k: tokens / v for k, v in best.items()},
        "served_over_direct_median": med["direct"] / med["served"],
        "served_over_direct_best": best["direct"] / best["served"],
        "batched_over_sequential_median": med["sequential"] / med["served"],
        "batched_over_sequential_best": best["sequential"] / best["served"],
        # CPU seconds of every process involved (served: client, conductor and worker): less
        # sensitive to other jobs on a shared machine than wall time
        "cpu_direct_over_served": statistics.median(cpu["direct"])
        / statistics.median(cpu["served"]),
        "cpu_sequential_over_batched": statistics.median(cpu["sequential"])
        / statistics.median(cpu["served"]),
        "tokens_equal": same,
        "times": times,
        "cpu": cpu,
    }
    return row


def table(rows: list[dict]) -> str:
    out = [
        "| config | load (before -> after) | direct tok/s | served tok/s | served / direct "
        "| CPU: direct / served | one at a time tok/s | batched / one at a time "
        "| CPU: one at a time / batched | tokens equal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m, b = r["tok_s_median"], r["tok_s_best"]
        out.append(
            f"| {r['config']} | {r['load']} | {m['direct']:,.0f} ({b['direct']:,.0f}) "
            f"| {m['served']:,.0f} ({b['served']:,.0f}) "
            f"| **{r['served_over_direct_median']:.2f}** ({r['served_over_direct_best']:.2f}) "
            f"| {r['cpu_direct_over_served']:.2f} "
            f"| {m['sequential']:,.0f} ({b['sequential']:,.0f}) "
            f"| **{r['batched_over_sequential_median']:.2f}x** "
            f"({r['batched_over_sequential_best']:.2f}x) "
            f"| {r['cpu_sequential_over_batched']:.2f}x | {r['tokens_equal']} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.chdir(ROOT)  # node impl paths are relative to the project root
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            print(f"{name}: load {loadavg()}", flush=True)
            rows.append(bench(name, args, Path(tmp)))
            print(table(rows[-1:]), flush=True)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
