"""Speculative decoding vs plain greedy decoding of the Llama example (issue 32 point 4).

`.venv/bin/python benchmarks/speculative.py [--prompts 4] [--max-new 64] [--repeat 3]` — the
target is `wgc_models/llama`'s decoder at its tiny sizes (seeded random weights: hidden 64, 2
layers, vocab 256), the draft its first layer and head (`wgc_models/llama/speculative.walk`, layer
skip), one CPU rank, `eos -1` (every reply is ``--max-new`` tokens), in `LocalCluster` with one
torch thread. The verify and draft steps run in their captured form (static shapes, bounded ports
padded to the bound: "steps run captured" counts them) with the CPU's `eager` backend and, with
``--inductor``, also compiled by inductor (capture bucket 1), each mode once per backend. For k
(the draft's guesses per target step) in 1, 2 and 4, and for the plain walk
(`wgc_models/llama/llama.walk`), each round sends ``--prompts`` random prompts one after another
and times them; the modes take turns within a round. Per k: the acceptance rate (accepted /
proposed guesses), tokens per target step (the verify steps' tokens over their number: 1 for
plain decoding), and the wall time per request, median (min-max) over the rounds, with its ratio
to plain greedy's in the same round. Every reply is asserted equal to plain greedy's, token for
token. ``--markdown PATH`` writes the table.
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

LLAMA = ROOT / "wgc_models" / "llama"
KS = (1, 2, 4)
PLACEMENT = """devices: [cpu]
place:
  - nodes: [{nodes}]
    ranks: [0]
kv_cache: {{page_size: 16, pages: 512, dtype: f32}}
batching: {{max_batch: 4, {batching}}}
"""
STEPS = {"eager": "backend: eager", "inductor": "backend: inductor, capture: [1]"}


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def cluster(walk: str, nodes: str, sets: dict[str, str], steps: str) -> LocalCluster:
    tmp = Path(tempfile.mkdtemp(prefix="wgc-bench-spec-"))
    (tmp / "p.yaml").write_text(PLACEMENT.format(nodes=nodes, batching=STEPS[steps]))
    result = Driver().compile(str(LLAMA / walk), str(tmp / "p.yaml"), sets)
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp / name).write_text(text)
    return LocalCluster(tmp)


def reply(c: LocalCluster, prompt: list[int]) -> list[int]:
    h = c.submit(c.request([Segment("text", torch.tensor(prompt, dtype=torch.int64))], ["text"]))
    c.run()
    assert h.error is None, h.error
    return [int(t) for o in h.outputs for t in o.tensor.reshape(-1)]


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    med, lo, hi = (fmt.format(x) for x in (statistics.median(values), min(values), max(values)))
    return f"{med} ({lo}-{hi})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=4, help="requests per round")
    ap.add_argument("--max-new", type=int, default=64, help="tokens per reply")
    ap.add_argument("--repeat", type=int, default=3, help="rounds")
    ap.add_argument("--inductor", action="store_true", help="also the steps compiled by inductor")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    sets = {"eos": "-1", "max_new_tokens": str(args.max_new), "kv_tokens": "512"}
    kinds = ["eager", "inductor"] if args.inductor else ["eager"]
    modes: dict[str, LocalCluster] = {}
    for steps in kinds:
        modes[f"plain {steps}"] = cluster("llama.walk", "LLM", sets, steps)
        for k in KS:
            spec_sets = {**sets, "speculative_tokens": str(k)}
            modes[f"k={k} {steps}"] = cluster("speculative.walk", "Target, Draft", spec_sets, steps)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 256, (24,), generator=g).tolist() for _ in range(args.prompts)]
    want = [reply(modes["plain eager"], p) for p in prompts]  # also warms every engine up
    for name, c in modes.items():
        assert [reply(c, p) for p in prompts] == want, f"{name} differs from plain greedy"
    for c in modes.values():  # count only what the timed rounds run
        for node in c.ranks[0].nodes.values():
            for key in getattr(node, "counts", {}):
                node.counts[key] = 0  # type: ignore[attr-defined]
    print(f"load before: {loadavg()}", flush=True)
    secs: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.repeat):
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        took: dict[str, float] = {}
        for name in order:
            t0 = time.perf_counter()
            got = [reply(modes[name], p) for p in prompts]
            took[name] = (time.perf_counter() - t0) / len(prompts)
            assert got == want, f"{name} differs from plain greedy"
            secs[name].append(took[name] * 1e3)
        for name in modes:
            ratios[name].append(took[f"plain {name.split()[1]}"] / took[name])
        print(f"round {r + 1}: " + ", ".join(f"{m} {t * 1e3:.1f} ms" for m, t in took.items()))
    print(f"load after: {loadavg()}")
    lines = [
        "| decoding | backend | acceptance rate | tokens per target step | steps run captured | "
        "ms per request | speed-up over plain (same steps, same round) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for steps in kinds:
        plain = f"plain {steps}"
        lines.append(f"| plain greedy | {steps} | — | 1.00 | — | {span(secs[plain])} | 1.00× |")
        for k in KS:
            name = f"k={k} {steps}"
            counts = modes[name].ranks[0].nodes["Target"].counts  # type: ignore[attr-defined]
            rate = counts["accepted"] / max(counts["proposed"], 1)
            per_step = (counts["steps"] + counts["accepted"]) / max(counts["steps"], 1)
            share = counts["captured"] / max(counts["steps"], 1)
            lines.append(
                f"| speculative, k = {k} | {steps} | {rate:.1%} | {per_step:.2f} | {share:.0%} | "
                f"{span(secs[name])} | **{span(ratios[name])}×** |"
            )
    text = "\n".join(lines)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
