"""The node's own in-graph decode step of `host_overhead.py`, timed alone: what of the LM rank's
host µs per row is Orpheus's captured step (the mask, the argmax, the stop) and not the runtime.

    .venv/bin/python benchmarks/lm_step_ops.py [--batch 16 128] [--repeat 2000]

Builds `host_overhead.py`'s plan (Orpheus's graph, `FakeLM` over `FakeEngine`) in one process
(`LocalCluster`), takes the LM's captured decode step (`StaticStep.fn`, the function a
`GraphRunner` replays: on a GPU it is one CUDA graph on the device) and calls it on a full
bucket of rows, single-threaded (``torch.set_num_threads(1)``), as the eager runner does. Per
batch: the whole step, and its parts alone (`FakeEngine`'s unit, returning fixed logits;
`OrpheusTokens.masked`, the audio mask's gather and ``masked_fill`` over ``[rows, vocab]``;
``argmax``; the stop's compare); the median of ``--repeat`` calls after a warm-up, in µs per
step and per row. Nothing here is the runtime's: the lane, the runner, the static buffers'
copies and the transport are left out. The machine load is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of one call of ``fn`` over ``repeat`` calls (after 50 unmeasured)."""
    for _ in range(50):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    os.chdir(ROOT)  # the nodes' impl paths resolve from the project root
    from host_overhead import compile_plan
    from hot_path import loadavg

    from wgc_runtime.host.local import LocalCluster

    print(f"load before: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        plan = compile_plan(Path(tmp), max(args.batch), 280)
        local = LocalCluster(plan)
        (ex,) = [ex for ex in local.ranks.values() if ex.captured.units]
        (units,) = ex.captured.units.values()
        step = units[0].step
        node = ex.nodes["LLM"]
        engine = node._engine  # pyright: ignore[reportPrivateUsage]
        tokens = node.tokens
        vocab = engine.model.config.vocab_size
        drops = tokens.drops(vocab, "cpu")
        rows = []
        with torch.inference_mode():
            for n in args.batch:
                ports = {
                    "token": torch.full((n, 1), 700, dtype=torch.long),
                    "spoken": torch.arange(n, dtype=torch.long) * 3 + 5,
                    "positions": torch.arange(n, dtype=torch.long) + 40,
                    "slots": torch.arange(n, dtype=torch.long),
                    "kv_lens": torch.arange(n, dtype=torch.int32) + 41,
                    "block_tables": torch.zeros((n, 24), dtype=torch.int32),
                }
                logits = engine.decode_unit({"tokens": ports["token"].reshape(-1)})["logits"]
                masked = tokens.masked(logits, drops, ports["spoken"])
                nxt = masked.argmax(-1)
                parts = {
                    "whole step (`fn`)": lambda p=ports: step.fn(p),
                    "FakeEngine unit": lambda p=ports: engine.decode_unit(
                        {"tokens": p["token"].reshape(-1)}
                    ),
                    "mask (`masked`)": lambda lg=logits, p=ports: tokens.masked(
                        lg, drops, p["spoken"]
                    ),
                    "argmax": lambda m=masked: m.argmax(-1),
                    "stop compare": lambda x=nxt: x == tokens.end_of_speech,
                }
                for label, fn in parts.items():
                    s = timed(fn, args.repeat)
                    rows.append((n, label, s * 1e6, s * 1e6 / n))
    print(f"vocab {vocab}; torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| batch | part | µs / step | µs / row |")
    print("| --- | --- | --- | --- |")
    for n, label, step_us, row_us in rows:
        print(f"| {n} | {label} | {step_us:,.1f} | {row_us:,.2f} |")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
