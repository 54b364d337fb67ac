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

Best of `--repeat` each, the grammar compiled outside the timing. The ratios are time(2N) /
time(N) and time(4N) / time(N): linear is 2 and 4 (the goal: at most 2.4 and 4.8, i.e. within
20% of linear). Prints a markdown table (also to `--markdown PATH`), a row that misses the goal
marked so; `--strict` exits 1 then.
"""

from __future__ import annotations

import argparse
import os
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
    table += f"\n\nload (1-minute average) {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    print(table)
    if opts.markdown:
        opts.markdown.write_text(table + "\n", encoding="utf-8")
    return 1 if opts.strict and not all(ok for _, ok in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
