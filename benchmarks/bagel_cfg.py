"""BAGEL's denoising with CFG as three labels of one paged pool, through the runtime, vs three
separate dense caches (what vLLM-Omni does) driven directly.

    .venv/bin/python benchmarks/bagel_cfg.py [--prompt-bytes 16 400] [--repeat 3]
        [--threads 1] [--json out.json]

The model is `examples/bagel` at its tiny sizes (seeded random weights), one CPU rank
(`placements/cpu.yaml`: the CFG-parallel walk, its three passes and `combine_cfg` in one
process). One text-to-image request with a prompt of ``--prompt-bytes`` bytes. Sides,
interleaved ``--repeat`` times:

* **runtime (labels)**: the request through `LocalCluster`: the prompt prefilled once into
  ``main`` and ``cfg_img`` (``cfg_text`` forked from ``main`` before it: shared pages), then 49
  denoising steps, each three read-only passes of the latent block against the three labels and
  BAGEL's guidance and Euler step, then the VAE decoder;
* **dense caches**: the same weights called directly in this process: each label's context
  prefilled into its own `DenseKV` (contiguous tensors, nothing shared), then the same 49 steps
  (three passes against the three caches, guidance, Euler), then the VAE decoder.

The images are checked equal (≤ 1 u8 step). Reported per prompt length: seconds per request and
per denoising step (the request's time over 49: the prefill and the decoder are a small part)
of each side, median (best) of the repeats, dense / runtime (goal ≥ 1.5× per step), and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    from examples.bagel.nodes import load_bagel, load_vae
    from wgc.interp import segment
    from wgc_runtime.components.bagel import Guidance, Schedule, euler, guide, unpatchify
    from wgc_runtime.components.block_attention import Block, DenseBlocks, DenseKV
    from wgc_runtime.contract.node import CallContext
    from wgc_runtime.host.local import LocalCluster

    torch.set_num_threads(args.threads)
    config = {"model": "tiny", "checkpoint": "", "seed": 0}
    cpu = torch.device("cpu")
    model, vae = load_bagel("LLM", config, cpu, "llm"), load_vae("vae_decoder", config, cpu)
    cfg = model.config
    cluster = LocalCluster(ROOT / "generated" / "bagel" / "cpu")

    def runtime(text: str, rid: str) -> torch.Tensor:
        req = cluster.request([segment("text", text)], ["image"])
        h = cluster.submit(req, rid).result()
        assert h.ok, h.error
        return h.outputs[0].tensor

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

    rows = []
    for n in args.prompt_bytes:
        text = ("a red cube on a blue table, " * (n // 28 + 1))[:n]
        rid = f"bagel-{n}"
        runtime(text, rid)  # warm-up
        load, times, outs = loadavg(), {"runtime": [], "dense": []}, {}
        for _ in range(args.repeat):
            for name, fn in (("runtime", runtime), ("dense", dense)):
                t0 = time.perf_counter()
                outs[name] = fn(text, rid)
                times[name].append(time.perf_counter() - t0)
        diff = int((outs["runtime"].int() - outs["dense"].int()).abs().max())
        assert diff <= 1, f"the runtime's image differs from the dense caches' by {diff}"
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        ratio = med["dense"] / med["runtime"]
        rows.append(
            {"prompt_bytes": n, "median_s": med, "best_s": best, "dense_over_runtime": ratio}
        )
        print(
            f"prompt {n} B: runtime {med['runtime']:.3f}s ({best['runtime']:.3f}) = "
            f"{1000 * med['runtime'] / (STEPS - 1):.1f} ms/step, dense {med['dense']:.3f}s "
            f"({best['dense']:.3f}) = {1000 * med['dense'] / (STEPS - 1):.1f} ms/step: "
            f"{ratio:.2f}x, max diff {diff}, load {load} -> {loadavg()}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
