"""One command for every table in benchmarks/README.md: run each benchmark script, then rewrite
only the README's generated blocks from what the scripts wrote.

    .venv/bin/python benchmarks/all.py [--only NAME ...] [--quick [--write]] [--base CHECKOUT]
    .venv/bin/python benchmarks/all.py --plots-only

Each script runs as its own subprocess, one after another (never two at once: they measure
time), with its README arguments (``--quick``: tiny sizes, a smoke check of every script that
writes nothing unless ``--write``). Its table comes from, in this order: the markdown file it
writes with ``--markdown PATH``, a function here over the JSON it writes with ``--json PATH``,
or the last markdown table it prints. The scratch files stay in ``--scratch`` (a new temporary
folder by default). Each block gets a line saying when, on what machine, with which command and
under what load (1-minute average before -> after) it was measured. The prose around the blocks
and the earlier runs' tables outside them are never touched (`readme_blocks.rewrite`).
``compare_hops`` (an A/B against another checkout) runs only with ``--base``.

The JSON a script writes is also kept in benchmarks/results/NAME.json (committed: the data the
figures are drawn from; never from ``--quick``), and the README's figures (`plots.FIGURES`) are
redrawn from there into benchmarks/plots/*.svg after the runs; ``--plots-only`` runs nothing and
only redraws them (matplotlib, in the ``bench`` extra, is imported only then).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
README = HERE / "README.md"
RESULTS = HERE / "results"
PLOTS = HERE / "plots"
sys.path.insert(0, str(HERE))

import plots  # noqa: E402
from bagel_mixed import table as bagel_mixed_table  # noqa: E402
from readme_blocks import rewrite, spans, tables  # noqa: E402


def vjepa_table(rows: list[dict]) -> str:
    """`vjepa_rollout.py --json`'s rows as the README's table: median (best) seconds."""
    out = [
        "| model | H | runtime (KV) | re-prefill | re-prefill / runtime | re-prefill / direct KV |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m, b = r["median_s"], r["best_s"]
        out.append(
            f"| {r['model']} | {r['horizon']} | {m['runtime']:.3f} s ({b['runtime']:.3f}) "
            f"| {m['native']:.3f} s ({b['native']:.3f}) | **{r['native_over_runtime']:.2f}×** "
            f"| {r['native_over_cached']:.2f}× |"
        )
    return "\n".join(out)


def pi05_table(rows: list[dict]) -> str:
    """`pi05_actions.py --json`'s rows: chunks/s, median (best)."""
    out = [
        "| N | runtime | reference loop | runtime / reference | max diff |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        m, b = r["chunks_per_s"], r["best"]
        out.append(
            f"| {r['concurrency']} | {m['runtime']:.1f} chunks/s ({b['runtime']:.1f}) "
            f"| {m['reference']:.1f} chunks/s ({b['reference']:.1f}) "
            f"| **{m['runtime'] / m['reference']:.2f}×** | {r['max_diff']:.1e} |"
        )
    return "\n".join(out)


def bagel_table(rows: list[dict]) -> str:
    """`bagel_cfg.py --json`'s rows: ms a denoising step (a request's time over its 49 steps),
    median (best), per runtime placement and the dense caches; dense / runtime per placement,
    median (the rounds' range)."""
    sides = [k for k in rows[0]["median_s"] if k != "dense"] if rows else []
    out = [
        "| prompt | "
        + " | ".join(f"runtime `{p}`" for p in sides)
        + " | dense caches | "
        + " | ".join(f"dense / `{p}`" for p in sides)
        + " |",
        "| --- " * (2 + 2 * len(sides)) + "|",
    ]
    for r in rows:
        m, b = r["median_s"], r["best_s"]

        def ms(k: str, m=m, b=b) -> str:
            return f"{1000 * m[k] / 49:.1f} ms ({1000 * b[k] / 49:.1f})"

        gains = []
        for p in sides:
            spread = r["ratio_per_round"][p]
            gains.append(
                f"**{r['dense_over_runtime'][p]:.2f}×** ({min(spread):.2f}-{max(spread):.2f})"
            )
        out.append(
            f"| {r['prompt_bytes']} B | "
            + " | ".join(ms(p) for p in sides)
            + f" | {ms('dense')} | "
            + " | ".join(gains)
            + " |"
        )
    return "\n".join(out)


def http_table(results: list[dict]) -> str:
    """`served_http.py --json`'s results: per model, latency one at a time (median, p90) and
    throughput (median, best) over HTTP and through the `Client`, and `wgc run` per request."""
    out = [
        "| model | HTTP latency | `Client` latency | HTTP overhead | HTTP req/s | `Client` req/s "
        "| HTTP / `Client` | `wgc run` per request | `/v1/audio/speech` first byte / whole |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        cold = "—" if r.get("wgc_run_s_median") is None else f"{r['wgc_run_s_median']:.1f} s"
        speech = (
            f"{r['speech_first_byte_ms_median']:.0f} / {r['speech_total_ms_median']:.0f} ms"
            if "speech_first_byte_ms_median" in r
            else "—"
        )
        out.append(
            f"| {r['model']} | {r['http_latency_ms_median']:.1f} ms (p90 "
            f"{r['http_latency_ms_p90']:.1f}) | {r['zmq_latency_ms_median']:.1f} ms (p90 "
            f"{r['zmq_latency_ms_p90']:.1f}) | {r['http_overhead_ms']:.1f} ms "
            f"| {r['http_rps_median']:.2f} ({r['http_rps_best']:.2f}) "
            f"| {r['zmq_rps_median']:.2f} ({r['zmq_rps_best']:.2f}) "
            f"| **{r['rps_http_over_zmq']:.2f}** | {cold} | {speech} |"
        )
    return "\n".join(out)


@dataclass(frozen=True)
class Bench:
    """One benchmark script: its README arguments, its ``--quick`` ones, and how its table
    comes back (``markdown``: it takes ``--markdown PATH``; ``json``: it takes ``--json PATH``;
    ``from_json``: the table is built here from that JSON; otherwise its last printed table)."""

    name: str
    args: tuple[str, ...]
    quick: tuple[str, ...]
    markdown: bool = False
    json: bool = False
    from_json: Callable[..., str] | None = None
    script: str = ""

    @property
    def path(self) -> Path:
        return HERE / (self.script or f"{self.name}.py")


BENCHES = (
    Bench(
        "frontend",
        ("--sizes", "1000", "10000", "--repeat", "3"),
        ("--sizes", "100", "1000", "--repeat", "1", "--kv-sizes", "20", "80"),
        markdown=True,
    ),
    Bench(
        "frontend_scale",
        ("--ranks", "250", "--calls", "500", "--repeat", "3"),
        ("--ranks", "10", "--calls", "20", "--repeat", "1"),
        markdown=True,
    ),
    Bench("lsp_check", ("--repeat", "3"), ("--repeat", "1", "--no-protocol"), markdown=True),
    Bench(
        "cfg_labels",
        (),
        ("--prefix", "64", "--steps", "3", "--warmup", "1", "--repeats", "1", "--layers", "1"),
        markdown=True,
    ),
    Bench(
        "compile",
        (),
        ("--sizes", "50", "100", "--repeat", "1"),
        markdown=True,
    ),
    Bench("runtime_hops", ("--requests", "300"), ("--requests", "20"), markdown=True),
    Bench("hot_path", (), ("--requests", "5", "--repeat", "1"), json=True),
    Bench(
        "host_overhead",
        ("--repeat", "3"),
        ("--concurrency", "1", "16", "--tokens", "35", "--repeat", "1"),
        markdown=True,
        json=True,
    ),
    Bench("startup", ("--rounds", "5"), ("--rounds", "1", "--examples", "llama"), markdown=True),
    Bench(
        "served_decode",
        ("--configs", "tiny", "small", "--repeat", "5"),
        ("--configs", "tiny", "--new", "4", "--concurrency", "2", "--repeat", "1"),
        markdown=True,
        json=True,
    ),
    Bench(
        "speech_tts",
        ("--repeat", "5"),
        ("--concurrency", "1", "--tokens", "35", "--placements", "cpu"),
        json=True,
    ),
    Bench(
        "speech_tts_omni",
        (
            "--family",
            "qwen3_omni",
            "--tokens",
            "50",
            "--placements",
            "cpu",
            "cpu-2rank",
            "cpu-3rank",
        ),
        ("--family", "qwen3_omni", "--concurrency", "1", "--tokens", "4", "--placements", "cpu"),
        json=True,
        script="speech_tts.py",
    ),
    Bench(
        "vjepa_rollout",
        (),
        ("--models", "tiny", "--horizons", "2", "--repeat", "1"),
        json=True,
        from_json=vjepa_table,
    ),
    Bench(
        "pi05_actions",
        (),
        ("--concurrency", "1", "2", "--repeat", "1"),
        json=True,
        from_json=pi05_table,
    ),
    Bench(
        "bagel_cfg",
        (),
        ("--prompt-bytes", "16", "--repeat", "2"),
        json=True,
        from_json=bagel_table,
    ),
    Bench(
        "bagel_mixed",
        (),
        ("--per-task", "1", "--repeat", "1", "--steps", "4"),
        json=True,
        from_json=bagel_mixed_table,
    ),
    Bench(
        "served_http",
        (),
        ("--model", "faults", "--requests", "20", "--concurrency", "4", "--repeat", "1"),
        json=True,
        from_json=http_table,
    ),
    Bench("sessions", ("--repeat", "5"), ("--repeat", "1", "--prompt", "32"), markdown=True),
    Bench(
        "speculative",
        ("--repeat", "3", "--inductor"),
        ("--repeat", "1", "--prompts", "1", "--max-new", "16"),
        markdown=True,
    ),
    Bench("compare_hops", ("--rounds", "3"), ("--rounds", "1", "--requests", "20")),
)


def machine() -> str:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        torch = f", torch {importlib.metadata.version('torch')}"
    except importlib.metadata.PackageNotFoundError:
        torch = ""
    return (
        f"{os.cpu_count()} CPUs ({model}), {platform.machine()}, "
        f"Python {platform.python_version()}{torch}"
    )


def load1() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def command(b: Bench, args: tuple[str, ...], scratch: Path) -> list[str]:
    cmd = [sys.executable, str(b.path), *args]
    if b.markdown:
        cmd += ["--markdown", str(scratch / f"{b.name}.md")]
    if b.json:
        cmd += ["--json", str(scratch / f"{b.name}.json")]
    return cmd


def table_of(b: Bench, stdout: str, scratch: Path) -> str:
    if b.markdown:
        return (scratch / f"{b.name}.md").read_text().strip()
    if b.from_json is not None:
        return b.from_json(json.loads((scratch / f"{b.name}.json").read_text()))
    found = tables(stdout)
    if not found:
        raise RuntimeError("it printed no markdown table")
    return found[-1]


def run_one(
    b: Bench,
    args: tuple[str, ...],
    scratch: Path,
    facts: str,
    timeout: float | None,
    quick: bool = False,
) -> str:
    """Run ``b`` once; the block's body (the provenance line, then its table)."""
    cmd = command(b, args, scratch)
    shown = " ".join(["benchmarks/" + b.path.name, *args])
    before, t0 = load1(), time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out, err = scratch / f"{b.name}.out", scratch / f"{b.name}.err"
    with out.open("w") as fo, err.open("w") as fe:  # written as it runs: a hang shows where
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=fo, stderr=fe, text=True, start_new_session=True
        )
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its worker processes too
            proc.wait()
            raise RuntimeError(f"no result within {timeout:.0f} s (its output: {out})") from None
    wall, after = time.perf_counter() - t0, load1()
    stdout = out.read_text()
    if rc != 0:
        tail = "\n".join((stdout + err.read_text()).splitlines()[-15:])
        raise RuntimeError(f"exit {rc}:\n{tail}")
    head = (
        f"_Generated by `benchmarks/all.py{' --quick' * quick}` on {started}: `{shown}` "
        f"({wall:.0f} s{'; smoke-check sizes, not a measurement' * quick}); "
        f"{facts}; load (1 min) {before} → {after}._"
    )
    return f"{head}\n\n{table_of(b, stdout, scratch)}\n"


def redraw(results: Path, out: Path) -> bool:
    """The README's figures from ``results`` into ``out``; False when matplotlib is missing."""
    try:
        written = plots.draw(results, out)
    except ModuleNotFoundError as e:
        if e.name != "matplotlib":
            raise
        print("plots: not drawn (no matplotlib: `pip install -e '.[bench]'`)")
        return False
    print(f"plots: drew {len(written)} figure(s) into {out}: {', '.join(p.name for p in written)}")
    return True


def main(argv: list[str] | None = None) -> int:
    names = [b.name for b in BENCHES]
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=", ".join(names))
    ap.add_argument("--quick", action="store_true", help="tiny sizes; README untouched")
    ap.add_argument("--write", action="store_true", help="with --quick: write the README anyway")
    ap.add_argument("--base", type=Path, help="the other checkout, for compare_hops")
    ap.add_argument("--scratch", type=Path, help="where the scripts' outputs go")
    ap.add_argument("--readme", type=Path, default=README)
    ap.add_argument("--plots-only", action="store_true", help="only redraw the figures")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the kept JSON files")
    ap.add_argument("--plots", type=Path, default=PLOTS, help="where the figures go")
    ap.add_argument(
        "--timeout", type=float, help="seconds per script (default: none; 600 with --quick)"
    )
    args = ap.parse_args(argv)
    if args.plots_only:
        return 0 if redraw(args.results, args.plots) else 1
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="wgc-bench-all-"))
    scratch.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or (600.0 if args.quick else None)
    facts = machine()
    print(f"{facts}; outputs in {scratch}", flush=True)
    bodies, failed = {}, []
    for b in BENCHES:
        if args.only and b.name not in args.only:
            continue
        run_args = b.quick if args.quick else b.args
        if b.name == "compare_hops":
            if args.base is None:
                print("compare_hops: skipped (needs --base CHECKOUT)", flush=True)
                continue
            run_args = ("--base", str(args.base), *run_args)
        print(f"{b.name}: running (load {load1()})", flush=True)
        try:
            bodies[b.name] = run_one(b, run_args, scratch, facts, timeout, args.quick)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            failed.append(b.name)
            print(f"{b.name}: FAILED: {e}", flush=True)
            continue
        print(bodies[b.name], flush=True)
    if bodies and (args.write or not args.quick):
        if not args.quick:  # smoke-check sizes never replace the figures' data
            args.results.mkdir(parents=True, exist_ok=True)
            for b in BENCHES:
                if b.name in bodies and b.json:
                    shutil.copyfile(scratch / f"{b.name}.json", args.results / f"{b.name}.json")
            redraw(args.results, args.plots)
        text = args.readme.read_text()
        for name in sorted(set(bodies) - set(spans(text))):
            failed.append(name)
            print(f"{name}: {args.readme} has no block for it (readme_blocks.block markers)")
            del bodies[name]
        args.readme.write_text(rewrite(text, bodies))
        print(f"rewrote {len(bodies)} block(s) of {args.readme}: {', '.join(bodies)}")
    if failed:
        print(f"failed: {', '.join(failed)} (their blocks are unchanged)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
