"""Autoregressive decode of the tiny decoder: wgc vs `transformers` `generate()`, side by side.

    .venv/bin/python benchmarks/decode.py [--configs tiny small] [--threads 1 2]
        [--batches 1 16] [--new 128] [--repeat 5] [--mixed 48] [--no-compiled]

Both sides run the SAME weights (a random `LlamaForCausalLM` saved as safetensors and loaded by
`wgc_models.layers.decoder.LlamaDecoder.from_pretrained`), greedy, fp32, on the CPU, with the
same intra-op threads (``torch.set_num_threads``, each value of ``--threads`` in turn):

* wgc: `LlamaDecoder` + `PagedKVPool` + the torch attention backend + `ContinuousBatcher` on
  the capture path (the CUDA-graph runner's static buffers, run eagerly on the CPU);
* wgc+compiled (unless ``--no-compiled``): the same, with the runner's ``"inductor"`` backend:
  the static decode step ``torch.compile``d (fullgraph, static shapes) once per batch bucket,
  the CPU analogue of graph capture. Compiling happens when the batcher is built (like a
  capture), outside the timed region; its time is reported separately ("compile s", summed
  over the buckets; a second build of an identical graph hits inductor's cache and is faster);
* transformers: ``model.generate(max_new_tokens=N, min_new_tokens=N, do_sample=False)``.

Each wgc side builds its engine and batcher once per (config, threads, batch) — as a server
would — and serves every timed run with it (fresh request ids; every request's pages are freed
when it leaves). The same-length runs use one bucket, the batch size (all rows run to the end
together, so no other bucket is ever used; for the eager sides buckets change nothing).

Two model sizes (``--configs``): ``tiny`` is the parity tests' decoder (hidden 64, 2 layers, 4
heads / 2 kv heads, vocab 1000), where a step is a few dozen tiny ops and per-op overhead
dominates; ``small`` (hidden 256, 4 layers, vocab 2048), where the weight-bound matrix products
that both sides share take most of a step.

Each request generates exactly ``--new`` tokens after a ``--prompt``-token prompt; the whole
generation is timed (prefill included). All sides are warmed up, then run ``--repeat`` times
interleaved (so a burst of load hits all). Reported per (config, threads, batch): tokens/s
from the best and the median wall time, the ratio of each to `generate()`, the ratio of the
best process CPU times (less sensitive to other processes on a shared machine than wall time),
whether the greedy tokens agree with `generate()`'s, and the machine load (``uptime``) before
and after each block.

Then (``--mixed`` > 0, first thread count) a mixed workload: requests with prompt lengths 8-64
and 16-128 new tokens, ``--slots`` batch slots: wgc's continuous batching against
``generate()`` serving the same requests in static batches (left-padded; a batch runs until its
longest request is done). Only requested tokens count.

``--graph-vs-eager`` (GPU only): one decode step of the static unit replayed as a CUDA graph vs
the same unit run eagerly on the same static buffers, at each ``--batches`` size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from wgc_models.layers.decode_engine import DecoderEngine
from wgc_models.layers.decoder import LlamaDecoder
from wgc_runtime.engines.batching import ContinuousBatcher, GenRequest
from wgc_runtime.engines.capture import inductor_available

CONFIGS = {
    "tiny": dict(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    ),
    "small": dict(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=1024,
    ),
}
CONFIG = CONFIGS["small"]  # the default for `graph_vs_eager` and the mixed workload's vocab


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def make_batcher(
    model: LlamaDecoder,
    slots: int,
    max_seq_len: int,
    backend: str = "eager",
    buckets: tuple[int, ...] | None = None,
) -> tuple[ContinuousBatcher, float]:
    """A batcher on the capture path with the runner's ``backend``, and its build time (for
    "inductor": compiling every bucket)."""
    engine = DecoderEngine.build(model, pages=slots * -(-max_seq_len // 16) + 8, page_size=16)
    t0 = time.perf_counter()
    batcher = ContinuousBatcher(
        engine,
        max_batch=slots,
        max_seq_len=max_seq_len,
        capture=True,
        buckets=buckets,
        graph_backend=backend,
    )
    built = time.perf_counter() - t0
    if backend == "inductor" and batcher.runner.backend != "inductor":
        print(
            f"   (compile failed, the compiled column runs eagerly: {batcher.runner.compile_error})"
        )
    return batcher, built


_IDS = iter(range(1 << 62))  # request ids never repeat across the runs of one batcher


def run_wgc(batcher: ContinuousBatcher, prompts: torch.Tensor, new: int) -> tuple[float, list]:
    reqs = [GenRequest(next(_IDS), prompts[i], new) for i in range(prompts.shape[0])]
    t0 = time.perf_counter()
    batcher.run(reqs)
    dt = time.perf_counter() - t0
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


def mixed_workload(n: int, seed: int = 1, vocab: int = 1000) -> list[tuple[torch.Tensor, int]]:
    """``n`` requests with prompt lengths 8..64 and 16..128 new tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        plen = int(torch.randint(8, 65, (1,), generator=g))
        new = int(torch.randint(16, 129, (1,), generator=g))
        out.append((torch.randint(0, vocab, (plen,), generator=g), new))
    return out


def mixed_wgc(batcher: ContinuousBatcher, work) -> tuple[float, list]:
    reqs = [GenRequest(next(_IDS), p, n) for p, n in work]
    t0 = time.perf_counter()
    batcher.run(reqs)
    dt = time.perf_counter() - t0
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
    from wgc_runtime.engines.capture import GraphRunner

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


def timed(fn, *args):
    """``fn(*args)`` → (wall seconds, process CPU seconds, its result)."""
    w, c = time.perf_counter(), time.process_time()
    _, out = fn(*args)
    return time.perf_counter() - w, time.process_time() - c, out


def build(cfg: dict) -> tuple[LlamaForCausalLM, LlamaDecoder]:
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    hf.generation_config.eos_token_id = None  # always generate exactly --new tokens
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        ours = LlamaDecoder.from_pretrained(tmp)
    return hf, ours


def _backends(args) -> list[str]:
    return ["eager", "inductor"] if args.compiled else ["eager"]


def same_length(hf, ours, cfg: dict, args) -> list[dict]:
    """Per batch size: tokens/s (best, median) of `generate()` and of each wgc side, their
    ratios to it, and the compile time (as printed)."""
    rows = []
    names = {"eager": "wgc", "inductor": "wgc+compiled"}
    print(
        f"{'batch':>5} {'side':>12} {'tok/s best/med':>17} {'vs hf best/med':>15} "
        f"{'cpu ratio':>9} {'hf tokens agree':>15} {'compile s':>9}"
    )
    for batch in args.batches:
        g = torch.Generator().manual_seed(batch)
        prompts = torch.randint(0, cfg["vocab_size"], (batch, args.prompt), generator=g)
        sides = {}
        for be in _backends(args):
            sides[be] = make_batcher(ours, batch, args.prompt + args.new, be, (batch,))
            run_wgc(sides[be][0], prompts, 4)  # warm-up
        run_hf(hf, prompts, 4)
        runs: dict[str, list] = {be: [] for be in sides}
        h = []
        for _ in range(args.repeat):  # interleaved, so a burst of load hits every side
            for be, (batcher, _) in sides.items():
                runs[be].append(timed(run_wgc, batcher, prompts, args.new))
            h.append(timed(run_hf, hf, prompts, args.new))
        n = batch * args.new
        bh, mh = min(t for t, _, _ in h), statistics.median(t for t, _, _ in h)
        ch = min(c for _, c, _ in h)
        print(f"{batch:>5} {'hf':>12} {n / bh:>8.0f} / {n / mh:<7.0f}")
        row: dict = {"batch": batch, "hf": (n / bh, n / mh)}
        rows.append(row)
        for be, w in runs.items():
            bw, mw = min(t for t, _, _ in w), statistics.median(t for t, _, _ in w)
            cw = min(c for _, c, _ in w)
            agree = min(sum(a == b for a, b in zip(r[2], h[0][2], strict=True)) for r in w)
            batcher, built = sides[be]
            comp = f"{built:>9.1f}" if be == "inductor" else f"{'':>9}"
            print(
                f"{batch:>5} {names[be]:>12} {n / bw:>8.0f} / {n / mw:<7.0f} "
                f"{bh / bw:>6.2f}x / {mh / mw:.2f}x {ch / cw:>8.2f}x {agree:>9}/{batch:<5} {comp}"
            )
            row[be] = {
                "tok_s": (n / bw, n / mw),
                "ratio": (bh / bw, mh / mw),
                "cpu_ratio": ch / cw,
                "agree": f"{agree}/{batch}",
                "compile_s": built,
            }
            batcher.close()
    return rows


def mixed(hf, ours, cfg: dict, args) -> dict:
    work = mixed_workload(args.mixed, vocab=cfg["vocab_size"])
    useful = sum(n for _, n in work)
    longest = max(p.numel() + n for p, n in work)
    sides = {}
    for be in _backends(args):
        sides[be] = make_batcher(ours, args.slots, longest, be)
        mixed_wgc(sides[be][0], work[: args.slots])  # warm-up
    runs: dict[str, list] = {be: [] for be in sides}
    h = []
    for _ in range(max(1, args.repeat // 2)):
        for be, (batcher, _) in sides.items():
            runs[be].append(mixed_wgc(batcher, work))
        h.append(mixed_hf(hf, work, args.slots))
    th = min(t for t, _ in h)
    print(
        f"mixed: {len(work)} requests (prompt 8-64, new 16-128), {args.slots} slots; "
        f"hf {useful / th:.0f} tok/s (static batches)"
    )
    result: dict = {"requests": len(work), "slots": args.slots, "hf": useful / th}
    for be, w in runs.items():
        tw = min(t for t, _ in w)
        agree = min(sum(a == b for a, b in zip(r[1], h[0][1], strict=True)) for r in w)
        batcher, built = sides[be]
        comp = f", compile {built:.1f} s ({len(batcher.runner.buckets)} buckets)"
        print(
            f"   {'wgc' if be == 'eager' else 'wgc+compiled'}: {useful / tw:.0f} tok/s "
            f"(continuous batching), {th / tw:.2f}x; tokens agree {agree}/{len(work)}"
            f"{comp if be == 'inductor' else ''}"
        )
        result[be] = {"tok_s": useful / tw, "ratio": th / tw, "agree": f"{agree}/{len(work)}"}
        batcher.close()
    return result


def markdown(results: list[dict]) -> str:
    """This run's tables, the README's columns: eager wgc vs `generate()`, then (where it ran)
    the compiled step, then the mixed traffic."""
    out = [
        "| config | batch | wgc tok/s (best / median) | hf tok/s | ratio best / median "
        "| CPU-time ratio | tokens agree |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for res in results:
        for row in res["rows"]:
            w = row["eager"]
            out.append(
                f"| {res['config']} | {row['batch']} | {w['tok_s'][0]:.0f} / {w['tok_s'][1]:.0f} "
                f"| {row['hf'][0]:.0f} / {row['hf'][1]:.0f} "
                f"| **{w['ratio'][0]:.2f}× / {w['ratio'][1]:.2f}×** | {w['cpu_ratio']:.2f}× "
                f"| {w['agree']} |"
            )
    compiled = [(res, row) for res in results for row in res["rows"] if "inductor" in row]
    if compiled:
        out += [
            "",
            "| config | batch | wgc (eager) best / median, CPU | wgc+compiled best / median, CPU "
            "| compile s |",
            "| --- | --- | --- | --- | --- |",
        ]
        for res, row in compiled:
            e, c = row["eager"], row["inductor"]
            out.append(
                f"| {res['config']} | {row['batch']} "
                f"| {e['ratio'][0]:.2f}× / {e['ratio'][1]:.2f}×, {e['cpu_ratio']:.2f}× "
                f"| **{c['ratio'][0]:.2f}× / {c['ratio'][1]:.2f}×, {c['cpu_ratio']:.2f}×** "
                f"| {c['compile_s']:.1f} |"
            )
    mixed_rows = [res for res in results if res.get("mixed")]
    if mixed_rows:
        out += [
            "",
            "| config | mixed traffic | hf tok/s (static batches) | wgc tok/s "
            "| wgc+compiled tok/s |",
            "| --- | --- | --- | --- | --- |",
        ]
        for res in mixed_rows:
            m = res["mixed"]
            side = {
                be: f"{m[be]['tok_s']:.0f} ({m[be]['ratio']:.2f}×)" if be in m else "—"
                for be in ("eager", "inductor")
            }
            out.append(
                f"| {res['config']} | {m['requests']} requests, {m['slots']} slots "
                f"| {m['hf']:.0f} | {side['eager']} | {side['inductor']} |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=["tiny", "small"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--graph-vs-eager", action="store_true", help="GPU only: captured decode step vs eager"
    )
    ap.add_argument("--mixed", type=int, default=48, help="requests in the mixed workload")
    ap.add_argument("--slots", type=int, default=16, help="batch slots in the mixed workload")
    ap.add_argument(
        "--no-compiled",
        dest="compiled",
        action="store_false",
        help="leave out the wgc+compiled side (torch.compile of the decode step)",
    )
    ap.add_argument(
        "--markdown", type=Path, help="write this run's tables there (benchmarks/all.py)"
    )
    args = ap.parse_args()
    if args.compiled and (why := inductor_available()) is not None:
        print(f"wgc+compiled left out: {why}")
        args.compiled = False

    if args.graph_vs_eager:
        _, ours = build(CONFIG)
        if not torch.cuda.is_available():
            print("graph vs eager: no CUDA device here, nothing to measure")
            return
        print(f"graph vs eager on {torch.cuda.get_device_name(0)}, decoder {CONFIG}")
        graph_vs_eager(ours, args.batches)
        return
    print(f"torch {torch.__version__}, cpus {os.cpu_count()}")
    results = []
    for name in args.configs:
        cfg = CONFIGS[name]
        hf, ours = build(cfg)
        print(f"\n== {name}: {cfg}")
        for threads in args.threads:
            # both sides use the same intra-op threads
            torch.set_num_threads(threads)
            print(f"-- threads {torch.get_num_threads()}; load before: {load()}")
            label = name if len(args.threads) == 1 else f"{name}, {threads} thread(s)"
            res: dict = {"config": label, "rows": same_length(hf, ours, cfg, args)}
            if args.mixed and threads == args.threads[0]:
                res["mixed"] = mixed(hf, ours, cfg, args)
            results.append(res)
            print(f"   load after: {load()}")
    if args.markdown:
        args.markdown.write_text(markdown(results))


if __name__ == "__main__":
    main()
