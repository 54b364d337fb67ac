"""Scaling of the two shapes issue 14 (point 6) found slow: many ranks, many chained calls.

    .venv/bin/python benchmarks/frontend_scale.py [--ranks 250] [--calls 500] [--repeat 3]
        [--markdown PATH]

* **Ranks**: `Driver.compile` (front end + placement rules + lowering + code generation, in
  process, nothing written) of a model of R stateless nodes called in one chain, each node on a
  rank of its own (R ranks, R - 1 cross-rank hops), at R = N, 2N and 4N (`--ranks N`; 4N =
  1,000 by default).
* **Calls**: `Driver.front_end` (parse + build + every pass, what `wgc check` runs) of one walk
  of C sequential calls of a kv-cache node, each reading the one before (the data chain that
  made the WG608 lint cubic), at C = N, 2N and 4N (`--calls N`; 4N = 2,000 by default, so the
  issue's 500 is N).

* **Past 4N** (issue 34, point 5; each a fresh `wgc` process, its CPU seconds and peak RSS
  from `getrusage`): `wgc compile` of 4N and 40N ranks (1,000 and 10,000; goal: 40N within 10×
  the CPU of 4N, under 1 GB), `wgc show` of one call of a node with 20N inputs and 20N outputs
  (5,000 arguments; goal: under 200 MB) and `wgc check` of a placement whose `batching.capture`
  lists 400N sizes (100,000: refused with WG816 before its items are read). `--no-big` skips
  them.

Best of `--repeat` each, the grammar compiled outside the timing. The ratios are time(2N) /
time(N) and time(4N) / time(N): linear is 2 and 4 (the goal: at most 2.4 and 4.8, i.e. within
20% of linear). Prints a markdown table (also to `--markdown PATH`), a row that misses the goal
marked so; `--strict` exits 1 then.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from frontend import kv_chain_model  # noqa: E402

from wgc.driver import Driver  # noqa: E402

GOAL = 1.2  # a ratio may be 20% above linear


def ranks_model(n: int) -> str:
    nodes = "".join(
        f'node N{i}: stateless {{\n  impl "m:N"\n  in  x: f32[4]\n  out x: f32[4]\n}}\n'
        for i in range(n)
    )
    calls = "".join(f"  N{i}({'x' if i == 0 else f'x = c{i - 1}'}) -> c{i} = x\n" for i in range(n))
    return (
        f"model ranks\n\n{nodes}\nwalk w(x?: f32[4]) {{\n{calls}  emit c{n - 1} as tensor\n}}\n\n"
        "flow main { w() }\n"
    )


def ranks_placement(n: int) -> str:
    groups = "".join(f"  - nodes: [N{i}]\n    ranks: [{i}]\n" for i in range(n))
    return f"devices: [{', '.join(['cpu'] * n)}]\nplace:\n{groups}"


def best(fn: Callable[[], object], repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def time_compile(n: int, repeat: int, tmp: str) -> float:
    walk, placement = Path(tmp, f"ranks{n}.walk"), Path(tmp, f"ranks{n}.yaml")
    walk.write_text(ranks_model(n), encoding="utf-8")
    placement.write_text(ranks_placement(n), encoding="utf-8")
    Path(tmp, "warm.walk").write_text(ranks_model(2), encoding="utf-8")
    Path(tmp, "warm.yaml").write_text(ranks_placement(2), encoding="utf-8")
    driver = Driver()
    driver.compile(str(Path(tmp, "warm.walk")), str(Path(tmp, "warm.yaml")))  # imports, grammar

    def run() -> None:
        result = driver.compile(str(walk), str(placement))
        assert not result.errors and result.files, [d.message for d in result.errors][:3]

    return best(run, repeat)


def time_check(n: int, repeat: int) -> float:
    text = kv_chain_model(n)
    driver = Driver()
    driver.front_end("warmup.walk", kv_chain_model(2))

    def run() -> None:
        result = driver.front_end(f"kv{n}.walk", text)
        assert not result.errors, [d.message for d in result.errors][:3]

    return best(run, repeat)


def wide_model(n: int) -> str:
    """One call of a node with ``n`` inputs (each a walk input) and ``n`` outputs."""
    ins = "".join(f"  in  x{i}: f32[4]\n" for i in range(n))
    outs = "".join(f"  out y{i}: f32[4]\n" for i in range(n))
    params = ", ".join(f"x{i}?: f32[4]" for i in range(n))
    args = ", ".join(f"x{i}" for i in range(n))
    results = ", ".join(f"y{i}" for i in range(n))
    return (
        f'model wide\n\nnode A: stateless {{\n  impl "m:A"\n{ins}{outs}}}\n\n'
        f"walk w({params}) {{\n  A({args}) -> {results}\n  emit y0 as tensor\n}}\n\n"
        "flow main { w() }\n"
    )


def capture_placement(n: int) -> str:
    sizes = ", ".join(str(b) for b in range(1, n + 1))
    return (
        "devices: [cpu]\nplace:\n  - nodes: [N0]\n    ranks: [0]\n"
        f"batching: {{max_batch: {n}, capture: [{sizes}]}}\n"
    )


def child(argv: list[str]) -> int:
    """`--child ARGV...`: run one `wgc` command here, then print its exit code, CPU seconds and
    peak RSS as JSON (what the parent reads; wgc's own output goes to /dev/null)."""
    from wgc.cli import main as wgc_main

    with open(os.devnull, "w") as null:
        sys.stdout, sys.stderr = null, null
        code = wgc_main.main(argv, standalone_mode=False)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    use = resource.getrusage(resource.RUSAGE_SELF)
    cpu = use.ru_utime + use.ru_stime
    print(json.dumps({"code": code, "cpu": cpu, "rss_mb": use.ru_maxrss / 1024}))
    return 0


def measure(argv: list[str], repeat: int) -> dict:
    """The best (least CPU) of ``repeat`` fresh processes running ``wgc ARGV``; the CPU of
    starting Python and importing wgc is taken off (an empty `--version` run's)."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--child", *argv], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["cpu"])


def big_rows(n: int, repeat: int, tmp: str) -> tuple[list[str], bool]:
    small, large, wide, caps = 4 * n, 40 * n, 20 * n, 400 * n
    files = {}
    for k in (small, large):
        files[k] = (Path(tmp, f"big{k}.walk"), Path(tmp, f"big{k}.yaml"))
        files[k][0].write_text(ranks_model(k), encoding="utf-8")
        files[k][1].write_text(ranks_placement(k), encoding="utf-8")
    base = measure(["--version"], repeat)["cpu"]
    got = {
        k: measure(["compile", str(w), "-p", str(p), "-o", str(Path(tmp, f"out{k}"))], repeat)
        for k, (w, p) in files.items()
    }
    wide_path = Path(tmp, "wide.walk")
    wide_path.write_text(wide_model(wide), encoding="utf-8")
    shown = measure(["show", str(wide_path)], repeat)
    cap_path = Path(tmp, "capture.yaml")
    cap_path.write_text(capture_placement(caps), encoding="utf-8")
    capped = measure(["check", str(cap_path), "--model", str(files[small][0])], repeat)
    ratio = (got[large]["cpu"] - base) / (got[small]["cpu"] - base)
    ok_ranks = ratio <= 10 and got[large]["rss_mb"] < 1024 and got[large]["code"] == 0
    ok_wide = shown["rss_mb"] < 200 and shown["code"] == 0
    ok_caps = capped["code"] == 1
    mark = {True: "ok", False: "**missed**"}
    lines = [
        "| what | size | CPU | peak RSS | goal | met |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| `wgc compile`, one node per rank | {small:,} ranks | {got[small]['cpu']:.1f} s | "
        f"{got[small]['rss_mb']:,.0f} MB | | |",
        f"| `wgc compile`, one node per rank | {large:,} ranks | {got[large]['cpu']:.1f} s "
        f"({ratio:.1f}× of {small:,}, start-up of {base:.1f} s off) | {got[large]['rss_mb']:,.0f}"
        f" MB | ≤ 10×, < 1 GB | {mark[ok_ranks]} |",
        f"| `wgc show`, one call of a node with {wide:,} inputs and outputs | {2 * wide:,} "
        f"arguments | {shown['cpu']:.1f} s | {shown['rss_mb']:,.0f} MB | < 200 MB | "
        f"{mark[ok_wide]} |",
        f"| `wgc check`, `batching.capture` of {caps:,} sizes | {caps:,} sizes | "
        f"{capped['cpu']:.1f} s (exit {capped['code']}, WG816) | {capped['rss_mb']:,.0f} MB | "
        f"refused | {mark[ok_caps]} |",
    ]
    return lines, ok_ranks and ok_wide and ok_caps


def row(what: str, unit: str, n: int, times: list[float]) -> tuple[str, bool]:
    r2, r4 = times[1] / times[0], times[2] / times[0]
    ok = r2 <= 2 * GOAL and r4 <= 4 * GOAL
    cells = " | ".join(f"{t * 1000:,.0f} ms" for t in times)
    line = f"| {what} | {n:,} / {2 * n:,} / {4 * n:,} {unit} | {cells} | {r2:.2f} | {r4:.2f} |"
    return line + (" ok |" if ok else " **missed** |"), ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=250, help="N for the rank rows (4N = 1,000)")
    ap.add_argument("--calls", type=int, default=500, help="N for the call rows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a ratio misses the goal")
    ap.add_argument("--no-big", action="store_true", help="skip the rows past 4N")
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2:])
    opts = ap.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        compile_times = [time_compile(k * opts.ranks, opts.repeat, tmp) for k in (1, 2, 4)]
    check_times = [time_check(k * opts.calls, opts.repeat) for k in (1, 2, 4)]
    rows = [
        row("`wgc compile`, one node per rank", "ranks", opts.ranks, compile_times),
        row("`wgc check`, chained kv-cache calls", "calls", opts.calls, check_times),
    ]
    table = "\n".join(
        [
            "| what | N / 2N / 4N | N | 2N | 4N | 2N / N | 4N / N | linear |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *(line for line, _ in rows),
        ]
    )
    big_ok = True
    if not opts.no_big:
        with tempfile.TemporaryDirectory() as tmp:
            big, big_ok = big_rows(opts.ranks, opts.repeat, tmp)
        table += "\n\n" + "\n".join(big)
    table += f"\n\nload (1-minute average) {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    print(table)
    if opts.markdown:
        opts.markdown.write_text(table + "\n", encoding="utf-8")
    return 1 if opts.strict and not (big_ok and all(ok for _, ok in rows)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
