"""Autoregressive decode of the tiny decoder: wgc vs `transformers` `generate()`, side by side.

    .venv/bin/python benchmarks/decode.py [--batches 1 16] [--new 128] [--repeat 3]

Both sides run the SAME weights (a random `LlamaForCausalLM` saved as safetensors and loaded by
`wgc_runtime.components.llama.LlamaDecoder.from_pretrained`), greedy, fp32, on the CPU:

* wgc: `LlamaDecoder` + `PagedKVPool` + the torch attention backend + `ContinuousBatcher` on
  the capture path (the CUDA-graph runner's static buffers, run eagerly on the CPU, with the
  next step's metadata planned on a side thread);
* transformers: ``model.generate(max_new_tokens=N, min_new_tokens=N, do_sample=False)``.

Then a mixed workload (``--mixed`` requests with prompt lengths 8-64 and 16-128 new tokens,
``--slots`` batch slots): wgc's continuous batching against ``generate()`` serving the same
requests in static batches (left-padded; a batch runs until its longest request is done).
Only requested tokens count.

``--graph-vs-eager`` (GPU only): one decode step of the static unit replayed as a CUDA graph vs
the same unit run eagerly on the same static buffers, at each ``--batches`` size.

Each request generates exactly ``--new`` tokens after a ``--prompt``-token prompt. Reported:
best-of-``--repeat`` wall time (runs interleaved) of the whole generation (prefill
included), generated tokens per second, the wgc/transformers ratio, whether the greedy
tokens agree, and the machine load (``uptime``) so a noisy run is visible.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from wgc_runtime.components.llama import DecoderEngine, LlamaDecoder
from wgc_runtime.engines.batching import ContinuousBatcher, GenRequest

CONFIG = dict(
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=1024,
)


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_wgc(model: LlamaDecoder, prompts: torch.Tensor, new: int) -> tuple[float, list]:
    batch, plen = prompts.shape
    per_req = -(-(plen + new) // 16)
    engine = DecoderEngine.build(model, pages=batch * per_req + 8, page_size=16)
    batcher = ContinuousBatcher(engine, max_batch=batch, max_seq_len=plen + new, capture=True)
    reqs = [GenRequest(i, prompts[i], new) for i in range(batch)]
    t0 = time.perf_counter()
    batcher.run(reqs)
    dt = time.perf_counter() - t0
    batcher.close()
    return dt, [r.tokens for r in reqs]


def run_hf(hf: LlamaForCausalLM, prompts: torch.Tensor, new: int) -> tuple[float, list]:
    mask = torch.ones_like(prompts)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(
            prompts,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    dt = time.perf_counter() - t0
    return dt, out[:, prompts.shape[1] :].tolist()


def mixed_workload(n: int, seed: int = 1) -> list[tuple[torch.Tensor, int]]:
    """``n`` requests with prompt lengths 8..64 and 16..128 new tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        plen = int(torch.randint(8, 65, (1,), generator=g))
        new = int(torch.randint(16, 129, (1,), generator=g))
        out.append((torch.randint(0, CONFIG["vocab_size"], (plen,), generator=g), new))
    return out


def mixed_wgc(model: LlamaDecoder, work, slots: int) -> tuple[float, list]:
    longest = max(p.numel() + n for p, n in work)
    engine = DecoderEngine.build(model, pages=slots * -(-longest // 16) + 8, page_size=16)
    batcher = ContinuousBatcher(engine, max_batch=slots, max_seq_len=longest, capture=True)
    reqs = [GenRequest(i, p, n) for i, (p, n) in enumerate(work)]
    t0 = time.perf_counter()
    batcher.run(reqs)
    dt = time.perf_counter() - t0
    batcher.close()
    return dt, [r.tokens for r in reqs]


def mixed_hf(hf: LlamaForCausalLM, work, slots: int) -> tuple[float, list]:
    """generate() serving the same requests in static batches of ``slots`` (arrival order):
    prompts left-padded, each batch runs until its longest request is done."""
    out: list = []
    t0 = time.perf_counter()
    for i in range(0, len(work), slots):
        chunk = work[i : i + slots]
        plen = max(p.numel() for p, _ in chunk)
        new = max(n for _, n in chunk)
        ids = torch.zeros((len(chunk), plen), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, (p, _) in enumerate(chunk):
            ids[j, plen - p.numel() :] = p
            mask[j, plen - p.numel() :] = 1
        with torch.no_grad():
            gen = hf.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
        out += [gen[j, plen : plen + n].tolist() for j, (_, n) in enumerate(chunk)]
    return time.perf_counter() - t0, out


def graph_vs_eager(model: LlamaDecoder, batches, steps: int = 200) -> None:
    """On a GPU: one decode step of the static unit, replayed as a CUDA graph vs run eagerly
    on the same static buffers (rows at position ~128 of a 256-token page table)."""
    from wgc_runtime.engines.cuda_graph import GraphRunner

    model = model.cuda()
    print(f"{'batch':>5} {'eager us/step':>14} {'graph us/step':>14} {'speed-up':>8}")
    for batch in batches:
        engine = DecoderEngine.build(model, pages=batch * 16 + 8, page_size=16)
        seqs = [(i, "main") for i in range(batch)]
        prompts = [torch.randint(0, CONFIG["vocab_size"], (127,)) for _ in range(batch)]
        engine.prefill(seqs, prompts)
        width = engine.width_for(256)
        specs = engine.decode_buffers(width)
        inputs = {k: torch.zeros((batch, *s.dims), dtype=s.dtype) for k, s in specs.items()}
        for b, (rid, lab) in enumerate(seqs):
            inputs["slots"][b] = int(engine.pool.append(rid, lab, 1)[0])
            table = engine.pool.page_table(rid, lab)
            inputs["block_tables"][b, : len(table)] = torch.tensor(table, dtype=torch.int32)
            inputs["positions"][b] = 127
            inputs["kv_lens"][b] = 128
        times = {}
        for capture in (False, True):
            r = GraphRunner(engine.decode_unit, specs, (batch,), device="cuda", capture=capture)
            r.capture()
            for _ in range(10):
                r.run(inputs, batch)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                r.run(inputs, batch)
            torch.cuda.synchronize()
            times[capture] = (time.perf_counter() - t0) / steps * 1e6
        print(
            f"{batch:>5} {times[False]:>14.0f} {times[True]:>14.0f} "
            f"{times[False] / times[True]:>7.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--graph-vs-eager", action="store_true", help="GPU only: captured decode step vs eager"
    )
    ap.add_argument("--mixed", type=int, default=48, help="requests in the mixed workload")
    ap.add_argument("--slots", type=int, default=16, help="batch slots in the mixed workload")
    args = ap.parse_args()
    # both sides use the same intra-op threads; on a small shared machine more than one thread
    # makes tiny ops wait on busy cores (milliseconds per op), which measures the machine
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()
    hf.generation_config.eos_token_id = None  # always generate exactly --new tokens
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        ours = LlamaDecoder.from_pretrained(tmp)
    print(f"tiny decoder: {CONFIG}")
    if args.graph_vs_eager:
        if not torch.cuda.is_available():
            print("graph vs eager: no CUDA device here, nothing to measure")
            return
        print(f"graph vs eager on {torch.cuda.get_device_name(0)}")
        graph_vs_eager(ours, args.batches)
        return
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpus {os.cpu_count()}")
    print(f"load before: {load()}")
    print(f"{'batch':>5} {'wgc tok/s':>10} {'hf tok/s':>10} {'ratio':>6}  tokens agree")
    for batch in args.batches:
        prompts = torch.randint(0, CONFIG["vocab_size"], (batch, args.prompt))
        run_wgc(ours, prompts, 4)  # warm-up both sides
        run_hf(hf, prompts, 4)
        w, h = [], []
        for _ in range(args.repeat):  # interleaved, so a burst of load hits both sides
            w.append(run_wgc(ours, prompts, args.new))
            h.append(run_hf(hf, prompts, args.new))
        tw, th = min(t for t, _ in w), min(t for t, _ in h)
        n = batch * args.new
        agree = sum(a == b for a, b in zip(w[0][1], h[0][1], strict=True))
        print(f"{batch:>5} {n / tw:>10.0f} {n / th:>10.0f} {th / tw:>5.2f}x  {agree}/{batch}")
    work = mixed_workload(args.mixed)
    useful = sum(n for _, n in work)
    mixed_wgc(ours, work[:4], 4)  # warm-up
    w, h = [], []
    for _ in range(max(1, args.repeat // 2)):
        w.append(mixed_wgc(ours, work, args.slots))
        h.append(mixed_hf(hf, work, args.slots))
    tw, th = min(t for t, _ in w), min(t for t, _ in h)
    agree = sum(a == b for a, b in zip(w[0][1], h[0][1], strict=True))
    print(
        f"mixed: {len(work)} requests (prompt 8-64, new 16-128), {args.slots} slots: "
        f"wgc {useful / tw:.0f} tok/s (continuous batching), hf {useful / th:.0f} tok/s "
        f"(static batches), {th / tw:.2f}x; tokens agree {agree}/{len(work)}"
    )
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
