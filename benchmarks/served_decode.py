"""The decoder served (`wgc run`'s processes) vs the same decoder driven directly by a
`DecodeRunner` in one process.

    .venv/bin/python benchmarks/served_decode.py [--configs tiny small] [--new 64]
        [--concurrency 16] [--repeat 3] [--threads 1] [--json out.json]

The model is `wgc_models/llama` (a `LlamaDecoder`, seeded random weights, ``eos = -1`` so every
request runs its full length), compiled with its ``cpu`` placement (1 CPU rank, ``max_batch``
16, capture buckets 1-16, eager backend) and ``--set`` sizes per config. Sides, interleaved
``--repeat`` times:

* **served**: `Cluster` (the conductor and one worker process, as `wgc run --serve` starts
  them) and a `Client`; ``--concurrency`` requests submitted at once, each a text prompt,
  collected: the executor batches the decode loop across requests and runs the node's captured
  decode step (`DecodeRunner` inside it);
* **direct**: in this process, the same weights (`llama.nodes.build_model`) in a
  `DecoderEngine` over a `PagedKVPool` of the same size; one prefill of every prompt, then
  ``--new`` decode steps, each one `DecodeRunner.step` for the batch (the same slots, positions,
  lengths and page tables the served node's step gets) and one `DecoderEngine.decode_unit` on
  the batch, greedy: what serving runs minus the executor, the processes and the transport.

Both do the same model work per request (a prefill and ``--new`` steps; the walk's loop runs
``max_new_tokens`` steps after the prefill's token, and emits the prefill's token and every step's
but the last). Tokens/s counts ``--new`` tokens per request. Worker start (loading, capture) and
the direct side's engine construction are outside the timings. Reported per config: tokens/s of
each side (median and best of the repeats), **served / direct** (issue 29's goal: ≥ 0.8 at the
tiny size), the same ratio in CPU seconds of every process involved (the client, conductor and
worker for the served side: steadier than wall time on a shared machine), whether the served
tokens equal the direct ones, and the machine load before and after.
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
    """The same weights in this process, stepped by a `DecodeRunner` (module docstring)."""

    def __init__(self, config: dict, pages: int) -> None:
        from wgc_models.llama.engine import DecoderEngine
        from wgc_models.llama.nodes import build_model
        from wgc_runtime.engines.decode_runner import DecodeRunner

        self.engine = DecoderEngine.build(build_model(config, "cpu"), pages=pages, page_size=16)
        self.label = "main"  # the pool takes any label (built without a list)
        limit = int(config["kv_tokens"])
        self.width = self.engine.width_for(limit)
        self.engine.decode_buffers(self.width)  # the padding page, the rope tables
        pad = self.engine.pad_slot // self.engine.pool.page_size
        self.runner = DecodeRunner(
            self.engine.pool, label=self.label, width=self.width, limit=limit, pad_page=pad
        )
        self.n = 0

    def run(self, texts: list[str], new: int) -> list[list[int]]:
        import torch

        requests = []
        for _ in texts:
            self.n += 1
            requests.append(f"r{self.n}")
        seqs = [(r, self.label) for r in requests]
        ids = [torch.tensor(list(t.encode()), dtype=torch.long) for t in texts]
        with torch.inference_mode():
            token = self.engine.prefill(seqs, ids).argmax(-1)
            out = [token]
            for _ in range(new):
                meta = self.runner.step(requests)
                assert not meta.failed, meta.failed
                bufs = meta.tensors(self.width)
                bufs["tokens"] = token
                token = self.engine.decode_unit(bufs)["next_token"]
                out.append(token)
        for r in requests:
            self.runner.leave(r)
            self.engine.free(r)
        return torch.stack(out, 1).tolist()


def served(client, texts: list[str]) -> list[list[int]]:
    streams = [client.submit([("text", t)], ["text"], deadline=600) for t in texts]
    return [[int(o.value) for o in s.collect()] for s in streams]


def bench(name: str, args, tmp: Path) -> dict:
    import torch

    from wgc_runtime.host.client import Client
    from wgc_runtime.host.processes.launcher import Cluster

    sets = {**CONFIGS[name], "eos": "-1", "max_new_tokens": str(args.new)}
    sets["kv_tokens"] = str(args.new + 96)
    folder = tmp / name
    folder.mkdir()
    plan = compile_plan(sets, folder)
    texts = prompts(args.concurrency)
    direct = Direct(node_config(plan), plan.kv_cache.pages)
    direct.run(texts[:2], 4)  # warm-up
    times: dict[str, list[float]] = {"served": [], "direct": []}
    cpu: dict[str, list[float]] = {"served": [], "direct": []}
    same = True
    load_before = loadavg()
    with Cluster(str(folder), progress=None) as cluster:
        assert cluster.client_address is not None
        with Client(cluster.client_address) as client:
            pids = [os.getpid(), *cluster.pids.values()]  # client, conductor, worker
            served(client, texts[:2])  # warm-up
            for r in range(args.repeat):
                got: dict[str, list[list[int]]] = {}
                for side in ("served", "direct") if r % 2 == 0 else ("direct", "served"):
                    pid_set = pids if side == "served" else [os.getpid()]
                    c0, t0 = cpu_seconds(pid_set), time.perf_counter()
                    if side == "served":
                        got[side] = served(client, texts)
                    else:
                        got[side] = direct.run(texts, args.new)
                    times[side].append(time.perf_counter() - t0)
                    cpu[side].append(cpu_seconds(pid_set) - c0)
                # the walk emits the prefill's token and every step's but the last
                pairs = zip(got["served"], got["direct"], strict=True)
                same = same and all(g == w[: len(g)] for g, w in pairs)
                same = same and all(len(g) == args.new for g in got["served"])
    tokens = args.new * len(texts)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    return {
        "config": name,
        "threads": torch.get_num_threads(),
        "load": f"{load_before} -> {loadavg()}",
        "requests": len(texts),
        "tokens_per_request": args.new,
        "tok_s_median": {k: tokens / v for k, v in med.items()},
        "tok_s_best": {k: tokens / v for k, v in best.items()},
        "served_over_direct_median": med["direct"] / med["served"],
        "served_over_direct_best": best["direct"] / best["served"],
        "served_over_direct_rounds": [
            d / s for d, s in zip(times["direct"], times["served"], strict=True)
        ],
        "cpu_direct_over_served": statistics.median(cpu["direct"])
        / statistics.median(cpu["served"]),
        "tokens_equal": same,
        "times": times,
        "cpu": cpu,
    }


def table(rows: list[dict]) -> str:
    out = [
        "| config | load (before -> after) | direct tok/s | served tok/s "
        "| served / direct (per-round range) | CPU: direct / served | tokens equal |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m, b = r["tok_s_median"], r["tok_s_best"]
        rounds = r["served_over_direct_rounds"]
        out.append(
            f"| {r['config']} | {r['load']} | {m['direct']:,.0f} ({b['direct']:,.0f}) "
            f"| {m['served']:,.0f} ({b['served']:,.0f}) "
            f"| **{r['served_over_direct_median']:.2f}** ({min(rounds):.2f}-{max(rounds):.2f}) "
            f"| {r['cpu_direct_over_served']:.2f} | {r['tokens_equal']} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path, help="write the table here (benchmarks/all.py)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.chdir(ROOT)  # node impl paths resolve from the project root
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            print(f"{name}: load {loadavg()}", flush=True)
            rows.append(bench(name, args, Path(tmp)))
            print(table(rows[-1:]), flush=True)
    print()
    print(table(rows))
    if args.markdown:
        args.markdown.write_text(table(rows) + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
