"""Probe the front end at the sizes a fuzzer reaches: every command must exit 0 or 1 with a code.

    .venv/bin/python benchmarks/frontend_limits.py [--timeout 60] [--only NAME ...] [--quick]

Writes hostile but well-formed inputs to a temporary folder (nested `loop`/`par` in walks and
`for`/`if`/`repeat` in flows at depths 30 to 3,000, nested expressions, nested YAML flow
collections, huge integer literals, an M*-format placement with a 20-digit rank, a 1,000-rank
placement, a 500-deep subflow call chain, a 50 MB file of node declarations) and runs each
through `wgc check`, `wgc fmt --check`, `wgc show` (text, html, dot) and `wgc compile` as a fresh
process with a timeout. A run passes when it exits 0, or 1 with a diagnostic code in its output;
exit 2, a traceback, `RecursionError` or the timeout fail it. Prints one line per run and a
summary; exits 1 when any run failed (issue 14, point 6: the list of what was probed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def head(param: str | None = None) -> str:
    """The model line and node `A`; with ``param``, a param `p` of that value A's config reads."""
    decl, config = (f"param p = {param}\n\n", "  config k = p\n") if param else ("", "")
    return (
        f"model probe\n\n{decl}node A: stateless {{\n"
        f'  impl "probe.nodes:A"\n  in  x: f32[4]\n  out x: f32[4]\n{config}}}\n\n'
    )


HEAD = head()
WALK = "walk w(x?: f32[4]) {\n  A(x) -> y = x\n  emit y as tensor\n}\n\n"
PLACEMENT = "devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: [0]\n"
CODE = re.compile(r"\bWG\d{3}\b")


# ------------------------------------------------------------------ inputs
def walk_loops(depth: int) -> str:
    # indented as a person would, up to 40 levels (past that the file would grow as depth^2)
    opens = "".join(f"{'  ' * min(i + 1, 40)}loop l{i} max 2 {{\n" for i in range(depth))
    closes = "".join(f"{'  ' * min(i + 1, 40)}}}\n" for i in reversed(range(depth)))
    ind = "  " * min(depth + 1, 41)
    body = f"{ind}A(x) -> y = x\n{ind}emit y as tensor\n"
    return f"{HEAD}walk w(x?: f32[4]) {{\n{opens}{body}{closes}}}\n\nflow main {{ w() }}\n"


def walk_pars(depth: int) -> str:
    body = "A(x) -> y = x"
    for _ in range(depth):
        body = f"par {{ {body} }}"
    return f"{HEAD}walk w(x?: f32[4]) {{\n  {body}\n  emit y as tensor\n}}\n\nflow main {{ w() }}\n"


def flow_nest(kind: str) -> Callable[[int], str]:
    opener = {
        "for": lambda i: f"for s{i} in request.inputs {{",
        "if": lambda i: "if true {",
        "repeat": lambda i: "repeat 2 {",
    }[kind]

    def make(depth: int) -> str:
        opens = "\n".join(opener(i) for i in range(depth))
        closes = "\n".join("}" for _ in range(depth))
        call = f"w(x = s{depth - 1})" if kind == "for" else "w()"
        return f"{HEAD}{WALK}flow main {{\n{opens}\n{call}\n{closes}\n}}\n"

    return make


def expr_parens(depth: int) -> str:
    return f"{head('(' * depth + '1' + ')' * depth)}{WALK}flow main {{ w() }}\n"


def expr_sum(terms: int) -> str:
    return f"{head(' + '.join(['1'] * terms))}{WALK}flow main {{ w() }}\n"


def expr_neg(depth: int) -> str:
    return f"{head('- ' * depth + '1')}{WALK}flow main {{ w() }}\n"


def big_int(digits: int) -> str:
    return f"{head('9' * digits)}{WALK}flow main {{ w() }}\n"


def subflow_chain(n: int) -> str:
    subs = "".join(f"subflow s{i}() {{\n  s{i + 1}()\n}}\n" for i in range(n - 1))
    subs += f"subflow s{n - 1}() {{\n  w()\n}}\n"
    return f"{HEAD}{WALK}{subs}flow main {{\n  s0()\n}}\n"


def sequential_calls(n: int) -> str:
    return f"{HEAD}{chain('A', n)}flow main {{ w() }}\n"


def chain(node: str | None, n: int) -> str:
    """Walk `w`: ``n`` calls, each reading the previous one's output (of `node`, else `N<i>`)."""
    calls = "".join(
        f"  {node or f'N{i}'}({'x' if i == 0 else f'x = c{i - 1}'}) -> c{i} = x\n" for i in range(n)
    )
    return f"walk w(x?: f32[4]) {{\n{calls}  emit c{n - 1} as tensor\n}}\n\n"


def node_file(megabytes: int) -> str:
    out = [HEAD]
    size, i = len(HEAD), 0
    while size < megabytes * 1_000_000:
        decl = f'node N{i}: stateless {{\n  impl "p:A"\n  in  x: f32[4]\n  out y: f32[4]\n}}\n'
        out.append(decl)
        size += len(decl)
        i += 1
    return "".join(out) + WALK + "flow main { w() }\n"


def ranks_model(n: int) -> str:
    nodes = "".join(
        f'node N{i}: stateless {{\n  impl "probe.nodes:A"\n  in  x: f32[4]\n  out x: f32[4]\n}}\n'
        for i in range(n)
    )
    return f"model ranks\n\n{nodes}\n{chain(None, n)}flow main {{ w() }}\n"


def ranks_placement(n: int) -> str:
    groups = "".join(f"  - nodes: [N{i}]\n    ranks: [{i}]\n" for i in range(n))
    return f"devices: [{', '.join(['cpu'] * n)}]\nplace:\n{groups}"


def yaml_nest(depth: int) -> str:
    return f"devices: {'[' * depth}cpu{']' * depth}\nplace:\n  - nodes: [A]\n    ranks: [0]\n"


def yaml_map_nest(depth: int) -> str:
    return f"kv_cache: {'{a: ' * depth}1{'}' * depth}\n{PLACEMENT}"


def mstar_rank(rank: str) -> str:
    return f"node_groups:\n  - node_names: [A]\n    ranks: [{rank}]\n"


# ------------------------------------------------------------------ cases
def cases(quick: bool) -> list[tuple[str, str, str | None]]:
    """(name, model text, placement text or None)."""
    plain = f"{HEAD}{WALK}flow main {{ w() }}\n"
    depths = (20, 33) if quick else (20, 30, 32, 33, 100, 400, 1000, 3000)
    out: list[tuple[str, str, str | None]] = []
    for d in depths:
        out.append((f"walk-loop-{d}", walk_loops(d), None))
        out.append((f"walk-par-{d}", walk_pars(d), None))
        for k in ("for", "if", "repeat"):
            out.append((f"flow-{k}-{d}", flow_nest(k)(d), None))
    for d in (100,) if quick else (1000, 5000):
        out.append((f"expr-parens-{d}", expr_parens(d), None))
        out.append((f"expr-sum-{d}", expr_sum(d), None))
        out.append((f"expr-neg-{d}", expr_neg(d), None))
    for d in (50,) if quick else (500, 5000):
        out.append((f"yaml-list-{d}", plain, yaml_nest(d)))
        out.append((f"yaml-map-{d}", plain, yaml_map_nest(d)))
    for digits in (50,) if quick else (5001, 100_000):
        out.append((f"int-{digits}-digits", big_int(digits), None))
    out.append(("mstar-rank-20-digits", plain, mstar_rank("99999999999999999999")))
    out.append(("mstar-rank-1e12", plain, mstar_rank("1000000000000")))
    n = 20 if quick else 1000
    out.append((f"placement-{n}-ranks", ranks_model(n), ranks_placement(n)))
    n = 20 if quick else 500
    out.append((f"subflow-chain-{n}", subflow_chain(n), None))
    out.append((f"sequential-calls-{n}", sequential_calls(n), None))
    out.append((f"nodes-{1 if quick else 50}MB", node_file(1 if quick else 50), None))
    return out


def commands(walk: Path, placement: Path, out: Path) -> list[tuple[str, list[str]]]:
    return [
        ("check", ["check", str(walk), "--model", str(walk), str(placement)]),
        ("fmt", ["fmt", "--check", str(walk)]),
        ("show", ["show", str(walk)]),
        ("show-html", ["show", "--format", "html", "-o", str(out / "w.html"), str(walk)]),
        ("show-dot", ["show", "--format", "dot", str(walk)]),
        ("show-plan", ["show", "-p", str(placement), "--format", "html", str(walk)]),
        ("compile", ["compile", "-p", str(placement), "-o", str(out / "gen"), str(walk)]),
    ]


def run_one(args: list[str], timeout: float) -> tuple[str, float, str]:
    exe = Path(sys.executable).with_name("wgc")
    t0 = time.perf_counter()
    try:
        res = subprocess.run(
            [str(exe), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return "TIMEOUT", time.perf_counter() - t0, ""
    dt = time.perf_counter() - t0
    text = res.stdout + res.stderr
    bad = res.returncode not in (0, 1) or "Traceback" in text or "RecursionError" in text
    if res.returncode == 1 and not CODE.search(text) and "would reformat" not in text:
        bad = True
    status = "ok" if not bad else f"FAIL rc={res.returncode}"
    codes = sorted(set(CODE.findall(text)))[:4]
    detail = " ".join(codes) if not bad else (text.strip().splitlines() or [""])[-1][:160]
    if len(text) > 100_000:
        detail += f" ({len(text):,} characters of output)"
    return status, dt, detail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--only", nargs="*", help="substrings of the case names to run")
    ap.add_argument("--commands", nargs="*", help="substrings of the command names to run")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke check")
    opts = ap.parse_args()
    failed = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, placement in cases(opts.quick):
            if opts.only and not any(s in name for s in opts.only):
                continue
            d = Path(tmp, name)
            d.mkdir()
            walk = d / "probe.walk"
            walk.write_text(model, encoding="utf-8")
            ppath = d / "p.yaml"
            ppath.write_text(placement or PLACEMENT, encoding="utf-8")
            for cmd_name, args in commands(walk, ppath, d):
                if opts.commands and not any(s in cmd_name for s in opts.commands):
                    continue
                status, dt, detail = run_one(args, opts.timeout)
                total += 1
                failed += status != "ok"
                print(f"{name:24} {cmd_name:10} {status:12} {dt:7.2f}s  {detail}", flush=True)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
