"""Host overhead of serving a decode loop: Orpheus's graph over a fake engine, on 2 ranks.

    .venv/bin/python benchmarks/host_overhead.py [--concurrency 1 16 128] [--tokens 280 ...]
        [--repeat 3] [--json out.json]

The graph is `wgc_models/orpheus/orpheus.walk` with its nodes swapped for `benchmarks/host_nodes`'s:
`FakeLM` is Orpheus's own `LLM` node (prefill, captured decode step, sampling and stop
bookkeeping, KV pool appends and page tables) over an engine whose model step returns fixed
logits in ~0 time; `FakeVocoder` turns each ``sliding(28, 7)`` window into fixed samples. The
placement is Orpheus's ``cpu-2rank`` (the LM on rank 0, the vocoder and the token stream on
rank 1) with ``max_batch`` and the capture buckets raised to 128. Each request speaks
``--tokens`` tokens (``option max_tokens``), so the LM rank makes ``c * tokens`` rows of decode
steps for ``c`` requests.

Per concurrency ``c`` (1, 16, 128 requests submitted at once through `Cluster` + `Client`, the
processes ``wgc run --serve`` starts), ``--repeat`` rounds, the concurrencies interleaved:

* **host µs per row per decode step** of each rank: the rank process's CPU time over the
  round (``/proc`` schedstat, every thread) / (``c * tokens``): with a fake engine everything
  it spends is host overhead (the runtime's and the node's Python, the transport);
* **conductor µs per row-step**: the conductor's CPU over the round / (``c * tokens``), and
  per request;
* **messages per request**: every message the cores exchange for the ``c`` requests
  (`LocalCluster.log`: conductor <-> ranks, rank <-> rank, to the client) / ``c``, by type
  (a `StreamItems` counts once, whatever it carries), and the conductor's own (to it and from
  it: with direct outputs, none per token or audio chunk);
* the round's wall time, and tokens per second.

Medians over the rounds with the spread (min-max); the machine load before and after each
round. ``--base CHECKOUT``: the same measurement of another checkout's runtime and nodes
(`speech_paired.start`: its processes import ``CHECKOUT/wgc_runtime`` and ``CHECKOUT/wgc_models``),
started beside this one and served in alternating order each round; then the per-round ratios
this / base are printed too (on a shared machine the paired ratio is what counts).
``--base-env K=V ...``: the base side's environment; without ``--base`` the base side is this
checkout under it (``--base-env WGC_DIRECT_OUT=0``: outputs through the conductor, paired with
direct outputs). ``--tokens 35 900``: both lengths in the same rounds, and a table of the
conductor's CPU per request at each with each round's ratio (flat when nothing of the
conductor's is per token or per second of a request: issue 29's goal, within 20%).
Published anchors for the per-row cost (M*: a Python router ≈ 21.7 µs per request per
step at batch 128, its Rust port 0.28 µs) are printed beside them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):  # once: a spawned child re-runs this module,
    if _p not in sys.path:  # and must keep a base deployment's shim (`start`) first
        sys.path.insert(0, _p)

from benchmarks.hot_path import cpu_seconds, loadavg  # noqa: E402

WALK = ROOT / "wgc_models" / "orpheus" / "orpheus.walk"
IMPLS = {
    '"orpheus.nodes:LLM"': '"benchmarks.host_nodes:FakeLM"',
    '"orpheus.nodes:SnacDecoder"': '"benchmarks.host_nodes:FakeVocoder"',
}
BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128]
# published per-row routing costs at batch 128 (µs per request per decode step)
ANCHORS = {"M* Python": 21.7, "M* Rust": 0.28}
TEXT = "hello there, this is a test"


def placement(max_c: int, kv_tokens: int) -> str:
    pages = max_c * (-(-kv_tokens // 16) + 1) + 16
    return (
        "devices: [cpu, cpu]\n"
        "place:\n  - nodes: [LLM]\n    ranks: [0]\n  - nodes: [snac_decoder]\n    ranks: [1]\n"
        f"params: {{kv_tokens: {kv_tokens}}}\n"
        f"kv_cache: {{page_size: 16, pages: {pages}, dtype: f32}}\n"
        f"batching: {{max_batch: {max_c}, capture: {[b for b in BUCKETS if b <= max_c]}}}\n"
        f"max_concurrent_requests: {max_c}\n"
    )


def compile_plan(out: Path, max_c: int, tokens: int) -> Path:
    from wgc.driver import Driver

    text = WALK.read_text()
    for old, new in IMPLS.items():
        assert old in text, f"{WALK} no longer names {old}"
        text = text.replace(old, new)
    walk = out / "host_orpheus.walk"
    walk.write_text(text)
    place = out / "host-2rank.yaml"
    place.write_text(placement(max_c, tokens + 64))
    result = Driver().compile(str(walk), str(place))
    if not result.ok:
        raise SystemExit("\n".join(d.message for d in result.errors))
    plan = out / "plan"
    plan.mkdir()
    for name, text in result.files.items():
        (plan / name).write_text(text)
    return plan


def messages(plan: Path, c: int, tokens: int, direct_out: bool = True) -> dict:
    """Every message of ``c`` requests run at once in one process, by type, per request; and
    the conductor's own (to it and from it), by type, per request. ``direct_out``: the ranks
    send the outputs to the client themselves, as worker processes do for a connected `Client`
    (`wgc_runtime.contract.route`; off: ``WGC_DIRECT_OUT=0``, through the conductor)."""
    from wgc_runtime.contract.flow import Segment
    from wgc_runtime.contract.messages import CONDUCTOR
    from wgc_runtime.host.local import LocalCluster

    local = LocalCluster(plan, direct_out=direct_out)
    options = {"max_tokens": tokens}
    req = local.request([Segment("text", TEXT)], ["audio"], options)
    local.submit(req)
    local.run()
    sent: list = []
    send = local.conductor.outbox

    def tapped(to: int, msg) -> None:
        sent.append(msg)
        send(to, msg)

    local.conductor.outbox = tapped
    local.log = []
    handles = [
        local.submit(local.request([Segment("text", TEXT)], ["audio"], options)) for _ in range(c)
    ]
    local.run()
    assert all(h.ok for h in handles), [h.error for h in handles if not h.ok]
    counts = collections.Counter(type(m).__name__ for _, m in local.log)
    mine = collections.Counter(type(m).__name__ for to, m in local.log if to == CONDUCTOR)
    mine.update(type(m).__name__ for m in sent)
    return {
        "per_request": sum(counts.values()) / c,
        "by_type": {k: v / c for k, v in counts.items()},
        "conductor": sum(mine.values()) / c,
        "conductor_by_type": {k: v / c for k, v in mine.items()},
    }


def served_round(client, pids: dict[str, int], c: int, tokens: int) -> dict:
    """``c`` requests of ``tokens`` tokens each, at once: every process's CPU per row-step."""
    c0 = {who: cpu_seconds([pid]) for who, pid in pids.items()}
    t0 = time.perf_counter()
    streams = [
        client.submit([("text", TEXT)], ["audio"], {"max_tokens": tokens}, deadline=600)
        for _ in range(c)
    ]
    frames = sum(len(s.collect()) for s in streams)
    wall = time.perf_counter() - t0
    rows = c * tokens
    cpu = {who: (cpu_seconds([pid]) - c0[who]) * 1e6 / rows for who, pid in pids.items()}
    return {"wall_s": wall, "tok_s": rows / wall, "frames": frames, "us_per_row": cpu}


def spread(vals: list[float]) -> str:
    return f"{statistics.median(vals):,.2f} ({min(vals):,.2f}-{max(vals):,.2f})"


def table(result: dict, side: str) -> str:
    first = result["sides"][side][str(result["concurrency"][0])][0]
    whos = sorted(first["us_per_row"], key=_order)
    head = f"| {side}: concurrency | " + " | ".join(f"{w} µs / row-step" for w in whos)
    head += " | conductor µs / request | messages / request | conductor messages / request"
    head += " | tokens/s | wall s |"
    lines = [head, "|" + " --- |" * (len(whos) + 6)]
    for c in result["concurrency"]:
        rounds = result["sides"][side][str(c)]
        cells = [spread([r["us_per_row"][w] for r in rounds]) for w in whos]
        per_req = [r["us_per_row"]["conductor"] * result["tokens"] for r in rounds]
        msgs = result["messages"].get(side, {}).get(str(c))
        shown = f"{msgs['per_request']:.1f}" if msgs else "-"
        theirs = f"{msgs['conductor']:.1f}" if msgs else "-"
        lines.append(
            f"| {c} | "
            + " | ".join(cells)
            + f" | {spread(per_req)} | {shown} | {theirs} "
            + f"| {spread([r['tok_s'] for r in rounds])} "
            + f"| {spread([r['wall_s'] for r in rounds])} |"
        )
    anchors = ", ".join(f"{k} {v} µs" for k, v in ANCHORS.items())
    lines.append(
        f"| anchors (per request per step at batch 128) | {anchors} |" + " |" * (len(whos) + 4)
    )
    return "\n".join(lines)


def ratios(result: dict) -> str:
    """this / base per process and concurrency: the median of the per-round ratios (range)."""
    base, this = result["sides"]["base"], result["sides"]["this"]
    whos = sorted(base[str(result["concurrency"][0])][0]["us_per_row"], key=_order)
    lines = [
        "| this / base: concurrency | " + " | ".join(f"{w} CPU" for w in whos) + " | tokens/s |",
        "|" + " --- |" * (len(whos) + 2),
    ]
    for c in result["concurrency"]:
        pairs = list(zip(base[str(c)], this[str(c)], strict=True))
        cells = [spread([t["us_per_row"][w] / b["us_per_row"][w] for b, t in pairs]) for w in whos]
        cells.append(spread([t["tok_s"] / b["tok_s"] for b, t in pairs]))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _order(who: str) -> tuple[int, str]:
    return (0, who) if who.startswith("rank") else (1, who)


def flat(results: dict[int, dict], side: str = "this") -> str:
    """Conductor CPU per request at each ``--tokens`` count, measured in the same rounds, and
    each round's longest over shortest (issue 29: flat within 20%)."""
    counts = sorted(results)
    lo, hi = counts[0], counts[-1]
    head = "| concurrency | " + " | ".join(f"conductor µs / request, {t} tokens" for t in counts)
    lines = [head + f" | {hi} ÷ {lo} tokens, per round |", "|" + " --- |" * (len(counts) + 2)]
    for c in results[lo]["concurrency"]:
        per = {
            t: [r["us_per_row"]["conductor"] * t for r in results[t]["sides"][side][str(c)]]
            for t in counts
        }
        ratios = [b / a for a, b in zip(per[lo], per[hi], strict=True)]
        lines.append(
            f"| {c} | " + " | ".join(spread(per[t]) for t in counts) + f" | {spread(ratios)} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=[280],
        help="tokens per request; several: each in the same rounds, and the conductor's CPU "
        "per request compared across them",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base", type=Path, help="another checkout, run side by side (paired)")
    ap.add_argument(
        "--base-env",
        nargs="*",
        default=[],
        metavar="K=V",
        help="the base side's environment (without --base: this checkout under it, e.g. "
        "WGC_DIRECT_OUT=0 for outputs through the conductor)",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path, help="write the tables here (benchmarks/all.py)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    os.chdir(ROOT)  # the nodes' impl paths resolve from the project root
    from speech_paired import start

    from wgc_runtime.host.client import Client

    max_c = max(args.concurrency)
    base_env = dict(kv.split("=", 1) for kv in args.base_env)
    names = ["base", "this"] if args.base or base_env else ["this"]
    results: dict[int, dict] = {
        t: {
            "concurrency": args.concurrency,
            "tokens": t,
            "sides": {n: {str(c): [] for c in args.concurrency} for n in names},
            "messages": {n: {} for n in names if n == "this" or not args.base},
        }
        for t in args.tokens
    }
    loads: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        plan = compile_plan(Path(tmp), max_c, max(args.tokens))
        for t, result in results.items():
            for n, sides in result["messages"].items():
                env = {**os.environ, **(base_env if n == "base" else {})}
                direct_out = env.get("WGC_DIRECT_OUT", "1") != "0"
                for c in args.concurrency:
                    sides[str(c)] = messages(plan, c, t, direct_out)
        clients = {}
        for n in names:
            base = args.base.resolve() if n == "base" and args.base else None
            cluster = start(stack, plan, base_env if n == "base" else {}, base)
            client = stack.enter_context(Client(cluster.client_address))
            clients[n] = (client, dict(cluster.pids))
            served_round(client, clients[n][1], min(4, max_c), min(args.tokens))  # warm-up
        for r in range(args.repeat):
            before = loadavg()
            order = names if r % 2 == 0 else names[::-1]
            for c in args.concurrency:
                for t in args.tokens if r % 2 == 0 else args.tokens[::-1]:
                    for n in order:
                        client, pids = clients[n]
                        got = served_round(client, pids, c, t)
                        results[t]["sides"][n][str(c)].append(got)
            loads.append(f"{before} -> {loadavg()}")
            print(f"round {r + 1}/{args.repeat}: load {loads[-1]}", flush=True)
    tables = []
    for t, result in results.items():
        print(f"{t} tokens: messages by type, per request: " + json.dumps(result["messages"]))
        if len(results) > 1:
            tables.append(f"**{t} tokens per request**")
        tables += [table(result, n) for n in names]
        tables += [ratios(result)] if "base" in names else []
    if len(results) > 1:
        tables.append(flat(results))
    text = (
        "\n\n".join(
            [*tables, "Load (1 min, 5, 15) per round, before -> after: " + "; ".join(loads) + "."]
        )
        + "\n"
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        one = results[args.tokens[0]] if len(results) == 1 else {"runs": results}
        args.json.write_text(json.dumps({**one, "load": loads}, indent=2))


if __name__ == "__main__":
    main()
