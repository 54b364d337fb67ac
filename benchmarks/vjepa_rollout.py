"""V-JEPA 2-AC rollouts through the runtime (a KV cache that grows one frame per step) vs the
re-prefill baseline (the predictor re-run over the whole growing sequence at every step).

    .venv/bin/python benchmarks/vjepa_rollout.py [--models tiny frames] [--horizons 4 15 30]
        [--repeat 3] [--threads 1] [--json out.json]

The model is `wgc_models/vjepa2_ac` (seeded random weights), compiled for one CPU rank with
``--set`` sizes per ``--models`` entry (`wgc_models.vjepa2_ac.config`: ``tiny``, 16
patches a frame; ``frames``, the real model's 16 x 16 patches — 258 cached tokens a frame — at
narrow widths) and ``max_horizon`` 31. One request: a 2-frame context clip and a rollout of H
steps. Sides, interleaved ``--repeat`` times:

* **runtime (KV)**: the request through `LocalCluster` (the conductor and the rank's executor in
  this process): the encoder, the rollout predictor's prefill of the context and the
  ``rollout_loop`` (the dynamic loop), one frame appended to the paged cache per step;
* **re-prefill**: the same weights called directly in this process: the encoder, then
  `native_rollout` (no cache: step k runs all 2 + k frames again) — no runtime overhead at all;
* **direct KV**: the encoder, then `cached_rollout` (a dense cache, one frame per step): the
  algorithm's own speed-up, without the runtime.

The runtime's frames are checked equal to the re-prefill's (≤ 1e-5). Reported per model and H:
the median (best) seconds of each side, re-prefill / runtime (goal ≥ 2×, ≥ 4× and ≥ 10× at H =
4, 15, 30: the paper's 2.08×, 3.76×, 12.5× on a GPU), re-prefill / direct KV, the largest
difference, and the machine load before and after.
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

SETS = {  # model -> the .walk's sizes for it
    "tiny": {"max_horizon": "31"},
    "frames": {
        "model": "frames",
        "embed": "32",
        "frame_tokens": "256",
        "layers": "4",
        "kv_heads": "4",
        "head_dim": "16",
        "kv_tokens": str(32 * 258),
        "max_horizon": "31",
    },
}
PLACEMENT = """devices: [cpu]
place:
  - nodes: [video_encoder, predictor, rollout_predictor, ac_predictor_mpc, ac_predictor_mpc_1,
            ac_predictor_mpc_2, ac_predictor_mpc_3, mpc_scorer]
    ranks: [0]
kv_cache: {page_size: 16, pages: 1100, dtype: f32}
batching: {max_batch: 1, capture: [1]}
max_concurrent_requests: 1
"""


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compile_plan(sets: dict[str, str], out: Path) -> Path:
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    out.mkdir(parents=True)
    place = out / "placement.yaml"
    place.write_text(PLACEMENT)
    result = Driver().compile(str(ROOT / "wgc_models/vjepa2_ac/vjepa2_ac.walk"), str(place), sets)
    if not result.ok:
        raise SystemExit("; ".join(d.message for d in result.errors))
    plan = out / "plan"
    plan.mkdir()
    sync(plan, result.files, check=False)
    return plan


def inputs(side: int):
    import torch

    g = torch.Generator().manual_seed(0)
    video = torch.randint(0, 256, (2, side, side, 3), generator=g, dtype=torch.uint8)
    actions = torch.randn(31, 7, generator=g)
    states = torch.randn(31, 7, generator=g)
    return video, actions, states


def bench(model: str, horizons: list[int], repeat: int, tmp: Path) -> list[dict]:
    import torch

    from wgc.interp import segment
    from wgc_models.vjepa2_ac.checkpoint import load_encoder, load_predictor
    from wgc_models.vjepa2_ac.model import cached_rollout, native_rollout, normalize
    from wgc_models.vjepa2_ac.vjepa2 import video_pixels
    from wgc_runtime.host.local import LocalCluster

    sets = SETS[model]
    plan = compile_plan(sets, tmp / model)
    config = {"model": sets.get("model", "tiny"), "checkpoint": "", "seed": 0}
    cpu = torch.device("cpu")
    encoder, predictor = load_encoder("e", config, cpu), load_predictor("p", config, cpu)
    crop = encoder.config.crop_size
    video, actions, states = inputs(crop)
    cluster = LocalCluster(plan)

    def runtime(h: int):
        seg = segment("video", video, actions=actions, states=states)
        req = cluster.request([seg], ["tensor"], {"rollout": True, "horizon": h})
        out = cluster.submit(req).result()
        assert out.ok, out.error
        return out.outputs[0].tensor

    def direct(h: int, rollout):
        with torch.inference_mode():
            z = normalize(encoder.encode_frames(video_pixels(video, crop)))
            z = z.reshape(2, -1, z.shape[-1])
            return rollout(predictor, z, actions, states, h)

    rows = []
    for h in horizons:
        runtime(h)  # warm-up: first-call costs (allocations, lazy inits) outside the timings
        times: dict[str, list[float]] = {"runtime": [], "native": [], "cached": []}
        sides = {
            "runtime": lambda h=h: runtime(h),
            "native": lambda h=h: direct(h, native_rollout),
            "cached": lambda h=h: direct(h, cached_rollout),
        }
        load = loadavg()
        outs = {}
        for _ in range(repeat):
            for name, fn in sides.items():
                t0 = time.perf_counter()
                outs[name] = fn()
                times[name].append(time.perf_counter() - t0)
        diff = float((outs["runtime"] - outs["native"]).abs().max())
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        rows.append(
            {
                "model": model,
                "horizon": h,
                "median_s": med,
                "best_s": best,
                "native_over_runtime": med["native"] / med["runtime"],
                "native_over_cached": med["native"] / med["cached"],
                "max_diff": diff,
                "load": f"{load} -> {loadavg()}",
            }
        )
        r = rows[-1]
        print(
            f"{model} H={h}: runtime {med['runtime']:.3f}s ({best['runtime']:.3f}), re-prefill "
            f"{med['native']:.3f}s ({best['native']:.3f}), direct KV {med['cached']:.3f}s: "
            f"{r['native_over_runtime']:.2f}x (direct {r['native_over_cached']:.2f}x), "
            f"max diff {diff:.1e}, load {r['load']}",
            flush=True,
        )
        assert diff <= 1e-5, "the runtime's rollout differs from the re-prefill baseline"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "frames"], choices=list(SETS))
    ap.add_argument("--horizons", nargs="+", type=int, default=[4, 15, 30])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            rows += bench(model, args.horizons, args.repeat, Path(tmp))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
