"""Front-end scaling and `wgc check` start-up, measured side by side in one run.

    .venv/bin/python benchmarks/frontend.py [--sizes 1000 10000] [--repeat 3]
        [--kv-sizes 200 800]

Reports, for synthetic valid models of N nodes (benchmarks/synth.py), the best-of-`repeat`
time of parse + build + verify, and the ratio between the largest and smallest size divided by
the size ratio (1.0 = perfectly linear; the goal is a 10x size costing at most 12x time). Then the
wall time of `wgc check wgc_models/` in a fresh interpreter (the CI linter's real cost).

Then one walk of N sequential calls of one kv-cache node (the shape that made the WG608
"unordered kv-cache calls" lint cubic): the front end at each `--kv-sizes` N and its time ratio,
and at the smallest N the lint itself side by side with the pairwise path queries it replaced.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from synth import synth_model  # noqa: E402

from wgc.driver import Driver  # noqa: E402
from wgc.ir.decls import EngineKind  # noqa: E402
from wgc.passes import dataflow  # noqa: E402


def time_front_end(n: int, repeat: int) -> tuple[float, int]:
    text = synth_model(n)
    driver = Driver()
    driver.front_end("warmup.walk", synth_model(20))  # compile the grammar outside the timing
    best = float("inf")
    errors = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = driver.front_end(f"synth{n}.walk", text)
        best = min(best, time.perf_counter() - t0)
        errors = len(result.errors)
    return best, errors


def time_check_examples(repeat: int) -> float:
    exe = Path(sys.executable).with_name("wgc")
    cmd = (
        [str(exe), "check", "wgc_models/"]
        if exe.exists()
        else [sys.executable, "-m", "wgc.cli", "check", "wgc_models/"]
    )
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=HERE.parent, check=True, capture_output=True)
        best = min(best, time.perf_counter() - t0)
    return best


def kv_chain_model(n: int) -> str:
    """One walk of ``n`` calls of one kv-cache node, each reading the previous call's output."""
    calls = "\n".join(
        f"  LLM(text = {'a' if i == 0 else f't{i - 1}'}) -> t{i} = token" for i in range(n)
    )
    return (
        'model kv\n\nnode LLM: kv_cache {\n  impl "m:LLM"\n  in  text: i64[1]\n'
        f"  out token: i64[1]\n}}\n\nwalk w(a: i64[1]) {{\n{calls}\n  emit t{n - 1} as text\n}}\n"
        "\nflow main {\n  for seg in request.inputs {\n    w(a = seg)\n  }\n}\n"
    )


def _pairwise_kv_order(model, w) -> int:
    """The WG608 check as it was: a path query each way for every pair of calls of a cache."""
    calls = [c for c in w.calls if model.node(c.node).engine is EngineKind.KV_CACHE]
    g = dataflow.call_graph(w)
    return sum(
        not nx.has_path(g, a.id, b.id) and not nx.has_path(g, b.id, a.id)
        for a, b in itertools.combinations(calls, 2)
    )


def _best(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def time_kv_chain(sizes: list[int], repeat: int) -> None:
    driver = Driver()
    driver.front_end("warmup.walk", kv_chain_model(2))
    rows = []
    for n in sizes:
        text = kv_chain_model(n)
        t = _best(repeat, lambda text=text, n=n: driver.front_end(f"kv{n}.walk", text))
        rows.append((n, t))
        print(f"kv chain   N={n:>6}: {t * 1000:9.1f} ms  (front end)")
    (n0, t0), (n1, t1) = rows[0], rows[-1]
    print(f"time ratio N={n1}/N={n0}: {t1 / t0:.2f} (size ratio {n1 / n0:.0f})")
    model = driver.front_end("kv.walk", kv_chain_model(n0), verify=False).model
    assert model is not None
    (w,) = model.walks
    new = _best(repeat, lambda: dataflow._unordered_kv_calls(model, w))
    old = _best(1, lambda: _pairwise_kv_order(model, w))
    print(
        f"WG608 at N={n0}: one sweep {new * 1000:.1f} ms, pairwise path queries "
        f"{old * 1000:.0f} ms ({old / new:.0f}x)"
    )


def markdown(rows: list[tuple[int, float]], check: float, loads: tuple[float, float]) -> str:
    """This run as the README's table row (sizes as columns)."""
    (n0, t0), (n1, t1) = rows[0], rows[-1]
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    sizes = " | ".join(f"N = {n:,}" for n, _ in rows)
    times = " | ".join(f"{t * 1000:,.0f} ms" for _, t in rows)
    return (
        f"| date | load (`uptime`, before → after) | {sizes} | ratio | `wgc check wgc_models/` |\n"
        + "| --- " * (len(rows) + 4)
        + "|\n"
        + f"| {date} | {loads[0]:.2f} → {loads[1]:.2f} | {times} | **{t1 / t0:.2f}** "
        f"(size ratio {n1 / n0:.0f}) | **{check * 1000:,.0f} ms** |\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kv-sizes", type=int, nargs="+", default=[200, 800])
    ap.add_argument(
        "--markdown", type=Path, help="write this run's table there (benchmarks/all.py)"
    )
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    for n in args.sizes:
        t, errors = time_front_end(n, args.repeat)
        rows.append((n, t))
        print(f"front end  N={n:>6}: {t * 1000:9.1f} ms  ({errors} errors)")
    (n0, t0), (n1, t1) = rows[0], rows[-1]
    print(f"time ratio N={n1}/N={n0}: {t1 / t0:.2f} (size ratio {n1 / n0:.0f}; goal <= 12)")
    check = time_check_examples(args.repeat)
    print(f"wgc check wgc_models/ (fresh interpreter): {check * 1000:.0f} ms (goal < 1000 ms)")
    time_kv_chain(args.kv_sizes, args.repeat)
    if args.markdown:
        args.markdown.write_text(markdown(rows, check, (load_before, os.getloadavg()[0])))


if __name__ == "__main__":
    main()
