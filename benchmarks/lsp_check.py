"""`wgc lsp`: how long re-checking a changed example takes, incremental vs from scratch.

    .venv/bin/python benchmarks/lsp_check.py [--repeat 3] [--no-protocol] [--markdown PATH]

For every example model and every top-level declaration in it, one edit as an editor makes it
(a space typed at the end of the declaration's first line), then the re-check the server runs on
a change: the compiler's front end with the `IncrementalParser` and the name index
(`wgc.lsp.document.analyse_walk`). Side by side, the same texts through a fresh `Driver` front
end (a whole parse each time: what the server would cost without the piece cache). Each round
edits every declaration of every example once; ``--repeat`` rounds. Reported: p50 and p95 over
every edit of every round (goal: p95 < 50 ms), the spread of the per-round p50s, and, unless
``--no-protocol``, the round trip through a real `wgc lsp` process (didChange -> the
publishDiagnostics that answers it), over one round. Load (1-minute average) before -> after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from wgc.driver import Driver  # noqa: E402
from wgc.lsp.document import EditorDriver, analyse_walk  # noqa: E402
from wgc.lsp.incremental import pieces  # noqa: E402


def edits(text: str) -> list[str]:
    """One edited text per top-level declaration: a space at the end of its first line."""
    out = []
    offset = 0
    for _, chunk in pieces(text):
        end = chunk.find("\n")
        if chunk.strip() and end > 0:
            at = offset + end
            out.append(text[:at] + " " + text[at:])
        offset += len(chunk)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def one_round(models: list[tuple[str, str]]) -> tuple[list[float], list[float], int]:
    """Incremental and from-scratch times (s) of every edit of every model, and the pieces
    the incremental parser parsed again (one per edit when the cache works)."""
    reparsed = 0
    inc: list[float] = []
    full: list[float] = []
    scratch = Driver()
    for path, text in models:
        editor = EditorDriver()
        analyse_walk(editor, path, text)  # the file as opened
        for changed in edits(text):
            t0 = time.perf_counter()
            doc = analyse_walk(editor, path, changed)
            inc.append(time.perf_counter() - t0)
            reparsed += editor.incremental.reparsed
            assert doc.tree is not None and not any(d.is_error for d in doc.diagnostics)
            t0 = time.perf_counter()
            scratch.front_end(path, changed)
            full.append(time.perf_counter() - t0)
            analyse_walk(editor, path, text)  # back to the original (the next edit's base)
    return inc, full, reparsed


def protocol_round(models: list[tuple[str, str]]) -> list[float]:
    """didChange -> publishDiagnostics through a `wgc lsp` process, every edit once."""
    sys.path.insert(0, str(ROOT / "tests" / "lsp"))
    from lsp_client import Client

    client = Client(ROOT)
    times = []
    try:
        for path, text in models:
            uri = client.open(Path(path), text)
            for changed in edits(text):
                t0 = time.perf_counter()
                client.change(uri, changed)
                times.append(time.perf_counter() - t0)
                client.change(uri, text)
            client.close_doc(uri)
    finally:
        client.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-protocol", action="store_true")
    ap.add_argument("--markdown", type=Path, help="write this run's table there (all.py)")
    args = ap.parse_args()
    os.chdir(ROOT)
    models = [
        (str(p.relative_to(ROOT)), p.read_text()) for p in sorted(ROOT.glob("wgc_models/*/*.walk"))
    ]
    load_before = os.getloadavg()[0]
    inc: list[float] = []
    full: list[float] = []
    round_p50s = []
    reparsed = 0
    for _ in range(args.repeat):
        i, f, reparsed = one_round(models)
        inc += i
        full += f
        round_p50s.append(statistics.median(i))
    proto = [] if args.no_protocol else protocol_round(models)
    load_after = os.getloadavg()[0]
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    n = len(inc) // args.repeat
    print(
        f"{len(models)} examples, {n} edits per round, {args.repeat} rounds; "
        f"{reparsed / n:.2f} declarations parsed again per edit"
    )
    spread = f"{ms(min(round_p50s))}-{ms(max(round_p50s))}"
    print(
        f"incremental re-check: p50 {ms(statistics.median(inc))}, p95 {ms(pct(inc, 0.95))}, "
        f"max {ms(max(inc))}; per-round p50 {spread}"
    )
    print(f"from scratch:         p50 {ms(statistics.median(full))}, p95 {ms(pct(full, 0.95))}")
    if proto:
        print(
            f"over the protocol:    p50 {ms(statistics.median(proto))}, p95 {ms(pct(proto, 0.95))}"
        )
    print(f"load {load_before:.2f} -> {load_after:.2f}")
    if args.markdown:
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        proto_cells = (
            f"{ms(statistics.median(proto))} | {ms(pct(proto, 0.95))}" if proto else "- | -"
        )
        args.markdown.write_text(
            "| date | load (before → after) | edits | parsed again per edit "
            "| incremental p50 | incremental p95 "
            "| per-round p50 | from scratch p50 | from scratch p95 | protocol p50 "
            "| protocol p95 |\n"
            + "| --- " * 11
            + "|\n"
            + f"| {date} | {load_before:.2f} → {load_after:.2f} | {n} × {args.repeat} "
            f"| {reparsed / n:.2f} declarations "
            f"| {ms(statistics.median(inc))} | **{ms(pct(inc, 0.95))}** "
            f"| {ms(min(round_p50s))}-{ms(max(round_p50s))} | {ms(statistics.median(full))} "
            f"| {ms(pct(full, 0.95))} | {proto_cells} |\n"
        )


if __name__ == "__main__":
    main()
