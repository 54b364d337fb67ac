"""Same-run A/B of `runtime_hops.py` between two checkouts (e.g. the previous commit and this one).

    .venv/bin/python benchmarks/compare_hops.py --base /path/to/other/checkout [--rounds 3]

The other checkout needs its own virtualenv (``<base>/.venv``; e.g. ``git worktree add`` the
previous commit and ``pip install -e '.[test]'`` there). Both `runtime_hops.py` runs alternate,
``--rounds`` times each, on this machine in one session, with the load average printed before
and after; per metric the table gives each side's median and spread (min-max) over the rounds,
and the ratio of medians (this checkout / base: below 1 is faster).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(?P<name>[^:]+):\s+(?P<value>[0-9.]+) us")


def run(checkout: Path, extra: list[str]) -> dict[str, float]:
    python = checkout / ".venv" / "bin" / "python"
    out = subprocess.run(
        [str(python), str(checkout / "benchmarks" / "runtime_hops.py"), *extra],
        capture_output=True,
        text=True,
        cwd=checkout,
        timeout=1200,
        check=True,
    ).stdout
    values = {}
    for line in out.splitlines():
        m = LINE.match(line.strip())
        if m:
            values[" ".join(m["name"].split())] = float(m["value"])
    return values


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, help="runtime_hops.py --requests (its default if not)")
    args = ap.parse_args()
    extra = [] if args.requests is None else ["--requests", str(args.requests)]
    print(f"machine: {os.cpu_count()} CPUs, load before {loadavg()}")
    runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    for r in range(args.rounds):
        for side, checkout in (("base", args.base.resolve()), ("this", ROOT)):
            runs[side].append(run(checkout, extra))
            print(f"  round {r + 1}: {side} done (load {loadavg()})", file=sys.stderr)
    print(f"load after {loadavg()}; {args.rounds} rounds each, alternating\n")
    names = [n for n in runs["this"][0] if all(n in v for vs in runs.values() for v in vs)]
    print("| metric (µs) | base median (min–max) | this median (min–max) | this / base |")
    print("|---|---|---|---|")
    for n in names:
        cols = []
        meds = []
        for side in ("base", "this"):
            xs = [v[n] for v in runs[side]]
            med = statistics.median(xs)
            meds.append(med)
            cols.append(f"{med:.1f} ({min(xs):.1f}–{max(xs):.1f})")
        print(f"| {n} | {cols[0]} | {cols[1]} | {meds[1] / meds[0]:.2f} |")


if __name__ == "__main__":
    main()
