"""The second turn of a chat with and without a session (issue 32 point 5).

`.venv/bin/python benchmarks/sessions.py [--prompt 600] [--new 40] [--repeat 5]` — the Llama
example (`wgc_models/llama`, compiled for one CPU rank, eager decode, seeded random weights at
``hidden 256, layers 4`` so a prefill costs something; ``eos -1``: every reply is
``max_new_tokens`` = 32 tokens) in `LocalCluster`. Turn 1 sends ``--prompt`` bytes in session
``s``; turn 2 sends the conversation so far plus ``--new`` bytes, once in the session (the
decoder prefills what the session's sequence does not hold) and once without (prefilled whole),
in alternating order each round. Per turn 2: the tokens its prefill fed, the prefill call's wall
time, and the whole request's; medians (min-max) over the rounds, the ratio within each round.
Every round checks that both give the same tokens. ``--markdown PATH`` writes the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from wgc.driver import Driver  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402

SIZES = {
    "hidden": "256",
    "intermediate": "512",
    "layers": "4",
    "heads": "8",
    "kv_heads": "4",
    "head_dim": "32",
    "kv_tokens": "2048",
    "eos": "-1",
}


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def compiled(tmp: Path) -> Path:
    p = tmp / "placement.yaml"
    p.write_text(
        "devices: [cpu]\nplace:\n  - nodes: [LLM]\n    ranks: [0]\n"
        "kv_cache: {page_size: 16, pages: 1024, dtype: f32}\n"
        "batching: {max_batch: 4, backend: eager}\nsessions: {max_sessions: 4}\n"
    )
    result = Driver().compile(str(ROOT / "wgc_models/llama/llama.walk"), str(p), SIZES)
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp / name).write_text(text)
    return tmp


class Timed:
    """The decoder engine's first call of a request (its prefill): tokens and seconds."""

    def __init__(self, c: LocalCluster) -> None:
        self.engine = c.ranks[0].nodes["LLM"]._engine
        self.calls: list[tuple[int, float]] = []
        forward = self.engine.forward

        def timed(seqs, toks):
            t0 = time.perf_counter()
            out = forward(seqs, toks)
            self.calls.append((sum(int(t.numel()) for t in toks), time.perf_counter() - t0))
            return out

        self.engine.forward = timed


def ask(c: LocalCluster, prompt: list[int], session: str | None) -> tuple[list[int], float]:
    req = c.request([Segment("text", torch.tensor(prompt, dtype=torch.int64))], ["text"])
    t0 = time.perf_counter()
    h = c.submit(req, session=session)
    c.run()
    took = time.perf_counter() - t0
    assert h.error is None, h.error
    return [int(o.tensor) for o in h.outputs], took


def rnd(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 256, (n,), generator=g).tolist()


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    med, lo, hi = (fmt.format(x) for x in (statistics.median(values), min(values), max(values)))
    return f"{med} ({lo}-{hi})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=600, help="turn 1's bytes")
    ap.add_argument("--new", type=int, default=40, help="turn 2's new bytes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    c = LocalCluster(compiled(Path(tempfile.mkdtemp(prefix="wgc-bench-sessions-"))))
    ask(c, rnd(8, 0), None)  # warm up: build the engine
    timed = Timed(c)
    print(f"load before: {loadavg()}", flush=True)
    rows: dict[str, dict[str, list[float]]] = {"session": {}, "whole": {}}
    ratios: list[float] = []
    for r in range(args.repeat):
        first = rnd(args.prompt, 2 * r + 1)
        reply, _ = ask(c, first, f"s{r}")
        conversation = first + reply + rnd(args.new, 2 * r + 2)
        got: dict[str, tuple[list[int], int, float, float]] = {}
        order = ("session", "whole") if r % 2 == 0 else ("whole", "session")
        for how in order:
            timed.calls.clear()
            toks, took = ask(c, conversation, f"s{r}" if how == "session" else None)
            fed, secs = timed.calls[0]
            got[how] = (toks, fed, secs, took)
            row = rows[how]
            row.setdefault("fed", []).append(fed)
            row.setdefault("prefill", []).append(secs * 1e3)
            row.setdefault("request", []).append(took * 1e3)
        assert got["session"][0] == got["whole"][0], "the session changed the reply"
        ratios.append(got["whole"][2] / got["session"][2])
        (_, fed_s, secs_s, _), (_, fed_w, secs_w, _) = got["session"], got["whole"]
        print(
            f"round {r + 1}: prefill {fed_s} vs {fed_w} tokens, "
            f"{secs_s * 1e3:.2f} vs {secs_w * 1e3:.2f} ms",
            flush=True,
        )
    print(f"load after: {loadavg()}")
    lines = [
        "| turn 2 | tokens prefilled | prefill ms | request ms (prefill + 32 decode steps) |",
        "| --- | --- | --- | --- |",
    ]
    for how, label in (("session", "in the session"), ("whole", "no session (whole)")):
        row = rows[how]
        lines.append(
            f"| {label} | {span(row['fed'], '{:.0f}')} | {span(row['prefill'])} | "
            f"{span(row['request'])} |"
        )
    lines.append(f"| prefill time, whole / session (within a round) | | **{span(ratios)}** | |")
    text = "\n".join(lines)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
