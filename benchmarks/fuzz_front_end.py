"""Nightly-size fuzz of the `wgc` command line: N mutated inputs, every exit code counted.

    .venv/bin/python benchmarks/fuzz_front_end.py [-n 100000] [--seed 0] [--timeout 20]
        [--save DIR] [--markdown PATH]

Each input is one `wgc` command run the way the console script runs it (`wgc.cli.main`, through
`guarded`, in this process: a fresh process per input would cost ~0.5 s of imports each), on a
file made by mutating a seed: the examples' `.walk` files and placements, `tests/fuzz_corpus/`,
and a tiny model. Mutations: a character replaced (by ASCII, a control character, a non-ASCII
letter, or a byte that is not UTF-8), a span deleted or repeated (up to 2,000 times), lines
swapped, a token from a dictionary of hostile values inserted (`1e309`, `nan`, a date,
`0.0.0.0`, 20-digit numbers, `!!binary`, deep brackets), a line spliced from another seed, the
file cut short; one to four of them. Sometimes the file name carries a byte that is not UTF-8,
and `--set` a hostile value. Commands: `check`, `fmt --check`, `show` in every format, `show
--placement`, `compile -o` (placements against their family's model).

Input ``i`` is drawn from ``Random(seed, i)`` alone, so a finding replays by its index (`--only
I`). A run passes when every command exits 0, or 1 with a diagnostic (`error[WGnnn]` or
`error:`); an exit 2 (an internal error) or a run past `--timeout` seconds fails it, and its
input is saved under `--save` (default: a temporary folder, printed) with the command line. The
report: exit codes per command, time (total, median, p99, slowest inputs) and peak memory (the
process's peak RSS, and its RSS before and after, so growth across inputs shows).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wgc.cli import main  # noqa: E402
from wgc.config import Env  # noqa: E402

CODE = re.compile(r"error(\[WG\d{3}\])?:")
TINY = (
    'model tiny\n\nparam p = 4\n\nnode A: stateless {\n  impl "m:A"\n  in  x: f32[p]\n'
    "  out x: f32[p]\n}\n\nwalk w(x?: f32[p]) {\n  loop l max 2 {\n    A(x) -> x\n  }\n"
    "  emit x as tensor\n}\n\nflow main { w() }\n"
)
TINY_PLACEMENT = "devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: [0]\n"
TOKENS = (
    "1e309",
    "-1e309",
    "nan",
    "inf",
    "-0",
    "99999999999999999999",
    "0x10",
    "2001-12-14",
    "2001-12-14T21:59:43Z",
    "0.0.0.0",
    "'::'",
    "!!binary aGk=",
    "!!set {a}",
    "~",
    "null",
    "[]",
    "{}",
    "[[[[[[[[",
    "]]]]",
    "((((((((",
    "))))",
    "{",
    "}",
    ":",
    ",",
    "-",
    "|",
    ">",
    "&a",
    "*a",
    "<<",
    "'",
    '"',
    "\\",
    "#",
    "\t",
    "\r",
    "\x00",
    "\u2028",
    "\ufeff",
    "ı",
    "é",
    "x" * 200,
    "loop l max 2 {",
    "par {",
    "if true {",
    "repeat 3 {",
    "match seg.modality {",
    "emit x as",
    "persist",
    "yield last",
    "until",
    "stream",
    "chunk sliding(window = 4, stride = 1)",
    "final drop",
    "kv_cache",
    "stateless",
    "f32[T]",
    "i64[0]",
    "bool[]",
    "u8[65536, 65536]",
    "request.inputs",
    "option.n",
    "ranks: [4096]",
    "ranks: [-1]",
    "tp: 0",
    "sp: 3",
    "capture: [0, 1]",
    "max_batch: 0",
    "pages: 99999999999",
    "hosts: {0: h}",
    "walks: [w]",
)
NOT_UTF8 = "\udcff"  # what `os.fsdecode` makes of the byte 0xff: written back as that byte


@dataclass
class Seed:
    text: str
    kind: str  # "walk" or "yaml"
    model: Path | None  # a placement's model; a walk's placement
    placement: Path | None = None


@dataclass
class Report:
    n: int = 0
    codes: Counter = field(default_factory=Counter)  # (command, outcome)
    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    slowest: list[tuple[float, int, str]] = field(default_factory=list)
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (index, outcome, argv)
    rss_before_mb: float = 0.0
    rss_after_mb: float = 0.0
    peak_mb: float = 0.0
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return len(self.failures)


class Overtime(BaseException):
    """Raised by the alarm: a BaseException, so `guarded` does not report it as exit 2."""


def seeds() -> list[Seed]:
    out: list[Seed] = []
    for walk in sorted(ROOT.glob("wgc_models/*/*.walk")):
        places = sorted(walk.parent.glob("placements/*.yaml"))
        cpu = next((p for p in places if p.stem == "cpu"), places[0] if places else None)
        out.append(Seed(walk.read_text(encoding="utf-8"), "walk", None, cpu))
        out += [Seed(p.read_text(encoding="utf-8"), "yaml", walk) for p in places]
    for path in sorted((ROOT / "tests" / "fuzz_corpus").glob("*")):
        if path.suffix not in (".walk", ".yaml"):
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        first = text.split("\n", 1)[0]
        named = ROOT / first.removeprefix("# model: ") if first.startswith("# model: ") else None
        model = named if named is not None and named.is_file() else None
        out.append(Seed(text, path.suffix[1:], model or ROOT / "wgc_models/bagel/bagel.walk"))
    out.append(Seed(TINY, "walk", None, None))
    return out


def mutate(rng: random.Random, text: str, pool: list[Seed]) -> str:
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        at = rng.randrange(n + 1)
        end = min(n, at + rng.choice((1, 2, 8, 40, 400)))
        op = rng.randrange(9)
        if op == 0 and n:  # one character
            ch = rng.choice(
                (chr(rng.randrange(32, 127)), chr(rng.randrange(0, 32)), "é", "\u200b", NOT_UTF8)
            )
            text = text[:at] + ch + text[at + 1 :]
        elif op == 1:
            text = text[:at] + text[end:]
        elif op == 2:
            text = text[:at] + text[at:end] * rng.choice((2, 3, 50, 2000)) + text[end:]
        elif op in (3, 4):
            text = text[:at] + rng.choice(TOKENS) + text[at:]
        elif op == 5:
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif op == 6:
            other = rng.choice(pool).text.split("\n")
            text = text[:at] + "\n" + rng.choice(other) + "\n" + text[at:]
        elif op == 7:
            text = text[:at]
        else:  # nest a region: the shape depth limits guard
            depth = rng.choice((3, 40, 400))
            text = text[:at] + "{" * depth + text[at:end] + "}" * depth + text[end:]
    return text


def command(rng: random.Random, seed: Seed, path: Path, out: Path) -> list[str]:
    sets = ["--set", rng.choice(("p=nan", "frame=1e309", "x=", "=1", "frame=-1"))]
    sets = sets if rng.random() < 0.1 else []
    if seed.kind == "yaml":
        model = str(seed.model)
        return rng.choice(
            (
                ["check", str(path), "--model", model],
                ["show", model, "--placement", str(path), *sets],
                ["show", model, "--placement", str(path), "--format", "html", *sets],
                ["compile", model, "--placement", str(path), "-o", str(out), *sets],
            )
        )
    placement = str(seed.placement or path.with_name("p.yaml"))
    fmt = rng.choice(("text", "json", "dot", "mermaid", "html"))
    return rng.choice(
        (
            ["check", str(path)],
            ["fmt", "--check", str(path)],
            ["show", str(path), "--format", fmt],
            ["show", str(path), "--placement", placement, *sets],
            ["compile", str(path), "--placement", placement, "-o", str(out), *sets],
        )
    )


def one(i: int, seed_value: int, pool: list[Seed], tmp: Path, timeout: float):
    """(argv, outcome, seconds, the file's bytes, its suffix) of input ``i``."""
    rng = random.Random(f"{seed_value}:{i}")
    seed = rng.choice(pool)
    text = mutate(rng, seed.text, pool)
    name = f"in{i}" + (NOT_UTF8 if rng.random() < 0.05 else "") + "." + seed.kind
    work = tmp / f"w{i}"
    work.mkdir()
    path = work / name
    data = text.encode("utf-8", "surrogateescape")
    path.write_bytes(data)
    (work / "p.yaml").write_text(TINY_PLACEMENT, encoding="utf-8")
    argv = command(rng, seed, path, work / "out")
    signal.setitimer(signal.ITIMER_REAL, timeout)
    t0 = time.perf_counter()
    try:
        res = CliRunner().invoke(main, argv, obj=Env())
        code, output = res.exit_code, res.output
    except Overtime:
        code, output = -1, ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    took = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    if code == 0:
        outcome = "0"
    elif code == 1:
        outcome = "1" if CODE.search(output) else "1 without `error:`"
    elif code == -1:
        outcome = "timeout"
    else:
        outcome = str(code)
    return argv, outcome, took, data, "." + seed.kind


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(n: int, seed_value: int = 0, timeout: float = 20.0, save: Path | None = None,
        only: list[int] | None = None, progress: bool = False) -> Report:  # fmt: skip
    pool = seeds()
    report = Report(rss_before_mb=rss_mb())

    def alarm(_signum: int, _frame: object) -> None:
        raise Overtime

    previous = signal.signal(signal.SIGALRM, alarm)
    t_start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="wgc-fuzz-") as tmp:
            for i in only if only is not None else range(n):
                argv, outcome, took, data, suffix = one(i, seed_value, pool, Path(tmp), timeout)
                what = argv[0] + (" --placement" if "--placement" in argv else "")
                report.n += 1
                report.codes[(what, outcome)] += 1
                report.times[what].append(took)
                report.slowest = sorted([*report.slowest, (took, i, what)], reverse=True)[:5]
                if outcome not in ("0", "1", "1 without `error:`"):  # exit 2, a timeout, ...
                    line = "wgc " + " ".join(argv)
                    report.failures.append((i, outcome, line))
                    if save is not None:
                        save.mkdir(parents=True, exist_ok=True)
                        (save / f"input-{seed_value}-{i}{suffix}").write_bytes(data)
                        (save / f"input-{seed_value}-{i}.txt").write_bytes(os.fsencode(line + "\n"))
                if progress and report.n % 1000 == 0:
                    print(f"{report.n:,} inputs, {report.failed} failed", file=sys.stderr)
    finally:
        signal.signal(signal.SIGALRM, previous)
    report.seconds = time.perf_counter() - t_start
    report.rss_after_mb = rss_mb()
    report.peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return report


def markdown(report: Report, seed_value: int) -> str:
    outcomes = sorted({o for _, o in report.codes})
    lines = [
        f"| command | inputs | {' | '.join(f'exit {o}' for o in outcomes)} | median | p99 | max |",
        "| --- | --- |" + " --- |" * (len(outcomes) + 3),
    ]
    for what in sorted(report.times):
        t = sorted(report.times[what])
        cells = " | ".join(f"{report.codes[(what, o)]:,}" for o in outcomes)
        p50, p99 = t[len(t) // 2], t[min(len(t) - 1, int(len(t) * 0.99))]
        lines.append(
            f"| `wgc {what}` | {len(t):,} | {cells} | {p50 * 1e3:.0f} ms | {p99 * 1e3:.0f} ms "
            f"| {t[-1] * 1e3:,.0f} ms |"
        )
    slow = ", ".join(f"#{i} `{w}` {s:.2f} s" for s, i, w in report.slowest)
    lines += [
        "",
        f"{report.n:,} inputs (seed {seed_value}) in {report.seconds:,.0f} s; internal errors "
        f"and timeouts: {report.failed}; peak RSS {report.peak_mb:,.0f} MB (RSS "
        f"{report.rss_before_mb:,.0f} MB before, {report.rss_after_mb:,.0f} MB after); "
        f"slowest: {slow}",
    ]
    lines += [f"- #{i} {o}: `{line}`" for i, o, line in report.failures[:20]]
    return "\n".join(lines)


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=100_000, help="how many inputs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds one command may take")
    ap.add_argument("--save", type=Path, help="where failing inputs go [default: a temp folder]")
    ap.add_argument("--only", type=int, nargs="+", help="replay these input indices")
    ap.add_argument("--markdown", type=Path)
    opts = ap.parse_args()
    save = opts.save or Path(tempfile.mkdtemp(prefix="wgc-fuzz-found-"))
    report = run(opts.n, opts.seed, opts.timeout, save, opts.only, progress=True)
    text = markdown(report, opts.seed)
    print(text)
    if report.failed:
        print(f"failing inputs saved in {save}", file=sys.stderr)
    elif opts.save is None:
        save.rmdir()
    if opts.markdown:
        opts.markdown.write_text(text + "\n", encoding="utf-8")
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main_())
