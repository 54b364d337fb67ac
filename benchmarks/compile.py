"""`wgc compile` time: every example × placement, and the synthetic model's scaling over 8 ranks.

    .venv/bin/python benchmarks/compile.py [--sizes 1000 10000] [--ranks 8] [--repeat 3]
                                           [--profile N]

Times `Driver.compile` in process (front end + placement rules + lowering + code generation, no
file writes), best of `repeat`, with the grammar compiled outside the timing. For the synthetic
models (benchmarks/synth.py) an `--ranks`-rank placement is written programmatically: nodes
round-robin over the ranks, so most channels cross ranks and every loop spreads. The ratio
between the largest and smallest size divided by the size ratio says how linear it is (goal: a
10x model costs at most 12x). `--profile N` prints the top cProfile entries for size N.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from synth import synth_model  # noqa: E402

from wgc.cli.targets import family_pairs  # noqa: E402
from wgc.driver import Driver  # noqa: E402


def round_robin_placement(n_nodes: int, ranks: int) -> str:
    groups = [[f"n{i}" for i in range(r, n_nodes, ranks)] for r in range(ranks)]
    lines = [f"# synthetic: {n_nodes} nodes round-robin over {ranks} ranks", "devices: ["]
    lines[-1] += ", ".join("cpu" for _ in range(ranks)) + "]"
    lines.append("place:")
    for r, nodes in enumerate(groups):
        lines.append(f"  - nodes: [{', '.join(nodes)}]")
        lines.append(f"    ranks: [{r}]")
    return "\n".join(lines) + "\n"


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_examples(repeat: int) -> list[tuple[str, str, float]]:
    os.chdir(ROOT)
    rows = []
    for walk, placement in family_pairs():
        t, result = best_of(repeat, lambda w=walk, p=placement: Driver().compile(w, p, {}))
        assert result.ok, (walk, placement, [str(d) for d in result.errors])
        ranks = len(result.plan.ranks)
        name = f"{Path(walk).parent.name}/{Path(placement).stem}"
        print(f"example {name:<32} {ranks} rank(s): {t * 1000:7.1f} ms")
        rows.append((Path(walk).parent.name, Path(placement).stem, t))
    return rows


def synth_files(tmp: Path, n: int, ranks: int) -> tuple[str, str]:
    walk = tmp / f"synth{n}.walk"
    walk.write_text(synth_model(n))
    placement = tmp / f"synth{n}-{ranks}rank.yaml"
    placement.write_text(round_robin_placement(n, ranks))
    return str(walk), str(placement)


def bench_synth(sizes: list[int], ranks: int, repeat: int) -> list[tuple[int, float, int, int]]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            walk, placement = synth_files(Path(d), n, ranks)
            t, result = best_of(repeat, lambda w=walk, p=placement: Driver().compile(w, p))
            assert result.ok, [str(x) for x in result.errors][:5]
            hops = len(result.plan.transfers)
            size = sum(len(text) for text in result.files.values())
            rows.append((n, t, hops, size))
            print(
                f"synthetic N={n:>6} over {ranks} ranks: {t * 1000:9.1f} ms "
                f"({hops} cross-rank hops, {size / 1e6:.1f} MB generated)"
            )
    (n0, t0, *_), (n1, t1, *_) = rows[0], rows[-1]
    size = n1 / n0
    print(
        f"time ratio N={n1}/N={n0}: {t1 / t0:.2f} (size ratio {size:.0f}; goal <= {1.2 * size:.0f})"
    )
    return rows


def markdown(examples: list, synth: list, ranks: int, loads: tuple[float, float]) -> str:
    """This run's two tables, the README's columns."""
    lines = [f"Every example × placement (load {loads[0]:.2f} → {loads[1]:.2f}):", ""]
    if examples:
        lines += ["| example | placements (ms) |", "| --- | --- |"]
        by_example: dict[str, list[str]] = {}
        for example, placement, t in examples:
            by_example.setdefault(example, []).append(f"{placement} {t * 1000:.0f}")
        lines += [f"| {e} | {', '.join(ps)} |" for e, ps in sorted(by_example.items())]
    else:
        lines.append("(left out: `--no-examples`)")
    (n0, t0, *_), (n1, t1, *_) = synth[0], synth[-1]
    lines += [
        "",
        f"Synthetic model over {ranks} ranks; ratio {n1:,} / {n0:,} = **{t1 / t0:.2f}** for a "
        f"{n1 / n0:.0f}× model (goal ≤ {1.2 * n1 / n0:.0f}):",
        "",
        "| nodes | compile | cross-rank hops | generated |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {n:,} | {t:.2f} s | {h:,} | {b / 1e6:.1f} MB |" for n, t, h, b in synth]
    return "\n".join(lines) + "\n"


def profile(n: int, ranks: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        walk, placement = synth_files(Path(d), n, ranks)
        prof = cProfile.Profile()
        prof.enable()
        Driver().compile(walk, placement)
        prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", type=int, metavar="N")
    ap.add_argument("--no-examples", action="store_true")
    ap.add_argument(
        "--markdown", type=Path, help="write this run's tables there (benchmarks/all.py)"
    )
    args = ap.parse_args()
    Driver().front_end("warmup.walk", synth_model(20))  # compile the grammar outside the timing
    if args.profile:
        profile(args.profile, args.ranks)
        return
    one, five, _ = os.getloadavg()
    print(f"load: {one:.2f} {five:.2f} (1, 5 min), {os.cpu_count()} cores")
    examples = [] if args.no_examples else bench_examples(args.repeat)
    synth = bench_synth(args.sizes, args.ranks, args.repeat)
    if args.markdown:
        args.markdown.write_text(markdown(examples, synth, args.ranks, (one, os.getloadavg()[0])))


if __name__ == "__main__":
    main()
