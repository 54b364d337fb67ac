"""`wgc run` start-up: the time to ready against the bare cost of the processes it starts.

    .venv/bin/python benchmarks/startup.py [--rounds 5] [--examples orpheus llama]
        [--placement cpu] [--markdown PATH]

Issue 9's goal: `wgc run` to ready for a 1-rank example ≤ 2× the bare cost of starting the
processes that import torch. Per round, interleaved (the machine's load moves between them):

* **bare**: as many fresh interpreters as the run has processes (the conductor and one worker
  per rank), started at once, each doing ``import torch`` and exiting: the floor a launcher
  that starts those processes cannot beat;
* **wgc ready**: ``wgc run generated/<example>/<placement> --input text=hi -o DIR`` from a fresh
  interpreter, the time from its start to the launcher's ready line (the launcher's ``ready in``
  plus the ``s before it`` the CLI spent first);
* **wgc total**: the same command's wall time to exit (one short request answered, its outputs
  written).

The ratio is per round (wgc ready / bare of the same round); the table gives the median and the
range over rounds, and the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = re.compile(r"ready in ([\d.]+) s \(([\d.]+) s before it")
WANT = {"orpheus": "audio", "llama": "text"}


def bare(processes: int) -> float:
    t0 = time.perf_counter()
    children = [subprocess.Popen([sys.executable, "-c", "import torch"]) for _ in range(processes)]
    for p in children:
        p.wait()
    return time.perf_counter() - t0


def wgc_run(plan: Path, want: str, out: str) -> tuple[float, float]:
    """(seconds to ready, seconds to exit) of one `wgc run` from a fresh interpreter."""
    cmd = [sys.executable, "-m", "wgc.cli", "run", str(plan), "--input", "text=hi"]
    t0 = time.perf_counter()
    done = subprocess.run([*cmd, "--want", want, "-o", out], capture_output=True, text=True)
    total = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    m = READY.search(done.stderr)
    if m is None:  # the CLI did nothing before the launcher: no "before it" part
        m2 = re.search(r"ready in ([\d.]+) s", done.stderr)
        assert m2 is not None, done.stderr
        return float(m2.group(1)), total
    return float(m.group(1)) + float(m.group(2)), total


def ranks(plan: Path) -> int:
    return len(list(plan.glob("rank_*.py")))


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--examples", nargs="+", default=["orpheus", "llama"])
    ap.add_argument("--placement", default="cpu")
    ap.add_argument("--markdown", metavar="PATH")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for example in args.examples:
            plan = ROOT / "generated" / example / args.placement
            n = ranks(plan) + 1
            wgc_run(plan, WANT[example], out)  # warm the page cache and lark's table cache
            b, r, t = [], [], []
            for _ in range(args.rounds):
                b.append(bare(n))
                ready, total = wgc_run(plan, WANT[example], out)
                r.append(ready)
                t.append(total)
            ratio = [x / y for x, y in zip(r, b, strict=True)]
            rows.append((example, n, b, r, t, ratio))
            print(f"{example}: bare {spread(b)} s, ready {spread(r)} s, ratio {spread(ratio)}")
    load1 = os.getloadavg()[0]
    lines = [
        f"{args.rounds} interleaved rounds per example, placement `{args.placement}`, "
        f"load {load0:.1f} -> {load1:.1f}.",
        "",
        "| example | processes | bare: each imports torch (s) | `wgc run` to ready (s) "
        "| ready / bare | `wgc run` to exit, one request (s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for example, n, b, r, t, ratio in rows:
        lines.append(
            f"| {example} | {n} | {spread(b)} | {spread(r)} | **{spread(ratio)}×** | {spread(t)} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")


if __name__ == "__main__":
    main()
