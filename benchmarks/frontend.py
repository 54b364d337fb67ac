"""Front-end scaling and `wgc check` start-up, measured side by side in one run.

    .venv/bin/python benchmarks/frontend.py [--sizes 1000 10000] [--repeat 3]

Reports, for synthetic valid models of N nodes (benchmarks/synth.py), the best-of-`repeat`
time of parse + build + verify, and the ratio between the largest and smallest size divided by
the size ratio (1.0 = perfectly linear; the goal is a 10x size costing at most 12x time). Then the
wall time of `wgc check examples/` in a fresh interpreter (the CI linter's real cost).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from synth import synth_model  # noqa: E402

from wgc.driver import Driver  # noqa: E402


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
        [str(exe), "check", "examples/"]
        if exe.exists()
        else [sys.executable, "-m", "wgc.cli", "check", "examples/"]
    )
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=HERE.parent, check=True, capture_output=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for n in args.sizes:
        t, errors = time_front_end(n, args.repeat)
        rows.append((n, t))
        print(f"front end  N={n:>6}: {t * 1000:9.1f} ms  ({errors} errors)")
    (n0, t0), (n1, t1) = rows[0], rows[-1]
    print(f"time ratio N={n1}/N={n0}: {t1 / t0:.2f} (size ratio {n1 / n0:.0f}; goal <= 12)")
    print(
        f"wgc check examples/ (fresh interpreter): {time_check_examples(args.repeat) * 1000:.0f} ms"
        " (goal < 1000 ms)"
    )


if __name__ == "__main__":
    main()
