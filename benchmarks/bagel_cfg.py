"""BAGEL's denoising with CFG as three labels of one paged pool, through the runtime, vs three
separate dense caches (what vLLM-Omni does) driven directly.

    .venv/bin/python benchmarks/bagel_cfg.py [--prompt-bytes 16 400] [--repeat 3]
        [--placements cpu-batched-cfg cpu] [--threads 1] [--json out.json]

The model is `wgc_models/bagel` at its tiny sizes (seeded random weights), one CPU rank. One
text-to-image request with a prompt of ``--prompt-bytes`` bytes. Sides, interleaved
``--repeat`` times:

* **runtime (labels)**, per placement, the request through `LocalCluster`: the prompt
  prefilled once into ``main`` and ``cfg_img`` (``cfg_text`` forked from ``main`` before it:
  shared pages), then 49 denoising steps, each three read-only passes of the latent block
  against the three labels and BAGEL's guidance and Euler step, then the VAE decoder.
  `placements/cpu-batched-cfg.yaml` (the CFG copies unplaced: the walk `image_gen`) makes each
  step one `LLM` call whose three passes are one batched forward over the three labels' pages;
  `placements/cpu.yaml` (the CFG-parallel walk `image_gen_cfg`) makes it four calls, the three
  passes (`LLM`, `LLM_cfg_text`, `LLM_cfg_img`) and `combine_cfg`;
* **dense caches**: the same weights called directly in this process: each label's context
  prefilled into its own `DenseKV` (contiguous tensors, nothing shared), then the same 49 steps
  (three passes against the three caches, guidance, Euler), then the VAE decoder.

The images are checked equal (≤ 1 u8 step). Reported per prompt length: seconds per request and
per denoising step (the request's time over 49: the prefill and the decoder are a small part)
of each side, median (best) of the repeats, dense / runtime per placement (goal ≥ 1.5× per
step) with its range over the rounds, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STEPS = 50  # the .walk's `steps`: 49 updates


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--prompt-bytes", nargs="+", type=int, default=[16, 400])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--placements", nargs="+", default=["cpu-batched-cfg", "cpu"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    from wgc.interp import segment
    from wgc_models.bagel.checkpoint import load_bagel, load_vae
    from wgc_models.bagel.model import Guidance, Schedule, euler, guide, unpatchify
    from wgc_models.layers.block_attention import Block, DenseBlocks, DenseKV
    from wgc_runtime.contract.node import CallContext
    from wgc_runtime.host.local import LocalCluster

    torch.set_num_threads(args.threads)
    config = {"model": "tiny", "checkpoint": "", "seed": 0}
    cpu = torch.device("cpu")
    model, vae = load_bagel("LLM", config, cpu, "llm"), load_vae("vae_decoder", config, cpu)
    cfg = model.config
    clusters = {p: LocalCluster(ROOT / "generated" / "bagel" / p) for p in args.placements}

    def runtime(cluster: LocalCluster) -> Callable[[str, str], torch.Tensor]:
        def run(text: str, rid: str) -> torch.Tensor:
            req = cluster.request([segment("text", text)], ["image"])
            h = cluster.submit(req, rid).result()
            assert h.ok, h.error
            return h.outputs[0].tensor

        return run

    @torch.inference_mode()
    def dense(text: str, rid: str) -> torch.Tensor:
        ids = torch.tensor(list(text.encode("utf-8")))
        caches = {label: DenseKV(cfg.llm.num_hidden_layers) for label in ("main", "cfg_img")}
        caches["cfg_text"] = DenseKV(cfg.llm.num_hidden_layers)  # main before the text: empty
        ropes = {"cfg_text": 0}
        for label in ("main", "cfg_img"):
            cb = model.text_block(ids, 0)
            step = DenseBlocks(caches[label], [Block(rid, label, cb.x.shape[0], causal=True)])
            model.language_model(cb.x, cb.positions, step, cb.gen)
            ropes[label] = cb.next_rope
        ctx = CallContext(request_id=rid, walk="", call=0)
        x = torch.randn((16, 16), generator=ctx.generator("latents", per_call=False))
        sched, g = Schedule(STEPS, 3.0), Guidance(4.0, 1.0)
        for i in range(STEPS - 1):
            t, dt = sched.at(i)
            tokens = model.latent_tokens(x, t)
            v = {}
            for label, cache in caches.items():
                cb = model.image_block(tokens, ropes[label], True)
                step = DenseBlocks(cache, [Block(rid, label, cb.x.shape[0], write=False)])
                v[label] = model.velocity(model.language_model(cb.x, cb.positions, step, cb.gen))
            x = euler(x, guide(v["main"], v["cfg_text"], v["cfg_img"], g, t), dt)
        z = unpatchify(x, cfg.latent_patch_size, cfg.vae.latent_channels)[None]
        img = vae.decode(z)[0]
        return (
            ((img.float() * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)
        )

    sides: dict[str, Callable[[str, str], torch.Tensor]] = {
        **{p: runtime(c) for p, c in clusters.items()},
        "dense": dense,
    }
    rows = []
    for n in args.prompt_bytes:
        text = ("a red cube on a blue table, " * (n // 28 + 1))[:n]
        rid = f"bagel-{n}"
        for fn in sides.values():
            fn(text, rid)  # warm-up
        load = loadavg()
        times: dict[str, list[float]] = {name: [] for name in sides}
        outs: dict[str, torch.Tensor] = {}
        for _ in range(args.repeat):
            for name, fn in sides.items():
                t0 = time.perf_counter()
                outs[name] = fn(text, rid)
                times[name].append(time.perf_counter() - t0)
        diffs = {p: int((outs[p].int() - outs["dense"].int()).abs().max()) for p in clusters}
        assert max(diffs.values()) <= 1, f"the runtime's image differs from the dense: {diffs}"
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        ratios = {p: med["dense"] / med[p] for p in clusters}
        spread = {
            p: [d / r for d, r in zip(times["dense"], times[p], strict=True)] for p in clusters
        }
        rows.append(
            {
                "prompt_bytes": n,
                "median_s": med,
                "best_s": best,
                "dense_over_runtime": ratios,
                "ratio_per_round": spread,
                "max_diff": diffs,
                "load": [load, loadavg()],
            }
        )
        per_step = ", ".join(
            f"{k} {1000 * med[k] / (STEPS - 1):.1f} ms/step ({1000 * best[k] / (STEPS - 1):.1f})"
            for k in sides
        )
        gains = ", ".join(
            f"{p} {ratios[p]:.2f}x ({min(spread[p]):.2f}-{max(spread[p]):.2f})" for p in clusters
        )
        print(
            f"prompt {n} B: {per_step}; dense / runtime: {gains}; max diff {diffs}, "
            f"load {load} -> {loadavg()}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
