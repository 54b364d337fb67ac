"""π0.5 action chunks per second through the runtime at 1, 4 and 16 concurrent observations vs
the reference loop (one observation at a time, the components called directly).

    .venv/bin/python benchmarks/pi05_actions.py [--concurrency 1 4 16] [--repeat 3]
        [--threads 1] [--json out.json]

The model is `wgc_models/pi05` at its tiny sizes (seeded random weights), compiled for one CPU
rank with ``max_batch`` 16. Sides, interleaved ``--repeat`` times:

* **runtime**: N observations (3 cameras, an 8-token prompt each) submitted at once to
  `LocalCluster` (the conductor and the rank's executor in this process) and run to the end:
  the executor batches each walk's calls across requests — the prefixes' prefill in one ragged
  pass over the pool, each of the 10 flow steps of the N chunks in one pass of the expert;
* **reference loop**: the same N observations one after another through
  `tests.reference.pi05_reference.action_chunks` (a dense cache each).

The chunks are checked equal (≤ 1e-4). Reported per N: chunks/s and actions/s (50 per chunk) of
each side (median of the repeats; best in brackets), runtime / reference, and the machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLACEMENT = """devices: [cpu]
place:
  - nodes: [vit_encoder, LLM, LLM_1, LLM_2, LLM_3, chunk_selector]
    ranks: [0]
kv_cache: {page_size: 16, pages: 512, dtype: f32}
batching: {max_batch: 16, capture: [1, 2, 4, 8, 16]}
max_concurrent_requests: 16
"""
STEPS, CHUNK = 10, 50


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compile_plan(out: Path) -> Path:
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    place = out / "placement.yaml"
    place.write_text(PLACEMENT)
    result = Driver().compile(str(ROOT / "wgc_models/pi05/pi05.walk"), str(place))
    if not result.ok:
        raise SystemExit("; ".join(d.message for d in result.errors))
    plan = out / "plan"
    plan.mkdir()
    sync(plan, result.files, check=False)
    return plan


def observations(n: int):
    import torch

    g = torch.Generator().manual_seed(n)
    return [
        (
            torch.randint(0, 256, (3, 32, 32, 3), generator=g, dtype=torch.uint8),
            torch.randint(0, 256, (8,), generator=g),
        )
        for _ in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    from tests.reference.pi05_reference import action_chunks
    from wgc.interp import segment
    from wgc_models.pi05.config import TINY
    from wgc_models.pi05.model import Pi0
    from wgc_models.pi05.nodes import load_policy, load_vision
    from wgc_runtime.contract.node import CallContext
    from wgc_runtime.host.local import LocalCluster

    torch.set_num_threads(args.threads)
    config = {"model": "tiny", "checkpoint": "", "seed": 0}
    cpu = torch.device("cpu")
    policy = Pi0(TINY).eval()  # the nodes' two parts in one module
    policy.load_state_dict(load_policy("LLM", config, cpu).state_dict(), strict=False)
    vision = load_vision("vit_encoder", config, cpu)
    policy.paligemma_with_expert.paligemma.model.vision_tower.load_state_dict(
        vision.vision_tower.state_dict()
    )
    policy.paligemma_with_expert.paligemma.model.multi_modal_projector.load_state_dict(
        vision.multi_modal_projector.state_dict()
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(compile_plan(Path(tmp)))
        for n in args.concurrency:
            obs = observations(n)
            rids = [f"obs-{n}-{i}" for i in range(n)]

            def runtime(obs=obs, rids=rids):
                reqs = [
                    cluster.request(
                        [segment("image", c, prompt=p)], ["action"], {"token_ids": True}
                    )
                    for c, p in obs
                ]
                hs = [cluster.submit(r, rid) for r, rid in zip(reqs, rids, strict=True)]
                cluster.run()
                assert all(h.ok for h in hs), [h.error for h in hs]
                return [h.outputs[0].tensor for h in hs]

            def reference(obs=obs, rids=rids):
                out = []
                for (cams, prompt), rid in zip(obs, rids, strict=True):
                    ctx = CallContext(request_id=rid, walk="", call=0)
                    x = torch.randn(CHUNK, 32, generator=ctx.generator("actions0", per_call=False))
                    out += action_chunks(policy, cams, prompt, [x], STEPS)
                return out

            runtime()  # warm-up
            load, times = loadavg(), {"runtime": [], "reference": []}
            outs = {}
            for _ in range(args.repeat):
                for name, fn in (("runtime", runtime), ("reference", reference)):
                    t0 = time.perf_counter()
                    outs[name] = fn()
                    times[name].append(time.perf_counter() - t0)
            diff = max(float((a - b).abs().max()) for a, b in zip(*outs.values(), strict=True))
            assert diff <= 1e-4, f"the runtime's chunks differ from the reference by {diff}"
            med = {k: n / statistics.median(v) for k, v in times.items()}  # chunks/s
            best = {k: n / min(v) for k, v in times.items()}
            rows.append({"concurrency": n, "chunks_per_s": med, "best": best, "max_diff": diff})
            print(
                f"N={n}: runtime {med['runtime']:.1f} chunks/s ({best['runtime']:.1f}) = "
                f"{med['runtime'] * CHUNK:.0f} actions/s, reference {med['reference']:.1f} "
                f"chunks/s ({best['reference']:.1f}): {med['runtime'] / med['reference']:.2f}x, "
                f"max diff {diff:.1e}, load {load} -> {loadavg()}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
