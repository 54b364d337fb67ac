"""CFG with KV labels: one step of 3 branches as 3 labels over one paged pool, against the
baseline the paper beat, 3 dense per-branch caches concatenated every step; plus the memory held.

    .venv/bin/python benchmarks/cfg_labels.py [--prefix 1024] [--steps 32] [--layers 4] ...

One CFG step = every branch (``main``, ``cfg_text``, ``cfg_img``) adds ``--query-tokens`` tokens
and attends over its whole sequence, in every layer:

* **paged (wgc)**: the branches are labels of ONE request in one `PagedKVPool`; ``cfg_text`` and
  ``cfg_img`` were forked from ``main`` after the prefix (full pages shared, the partial page
  copied). Per step: `prepare_step` (append + metadata), `plan` once, then per layer `write_kv`
  and ONE batched `forward` for the 3 branches (torch backend, the CPU reference).
* **paged, unshared**: the same with ``fork(share=False)`` (every page copied): paging and
  batching without prefix sharing, to separate the two effects.
* **dense (baseline)**: each branch owns a ``[1, kv_heads, len, head_dim]`` K and V per layer (the
  Hugging Face cache layout); per step ``torch.cat`` grows each one, then one
  ``scaled_dot_product_attention`` per branch and layer.

Both compute the same attention (the script checks the outputs agree). Memory: bytes held for 16
requests of mixed lengths, paged (pages in use) vs dense padded to the longest request, and for
the 3 CFG branches (shared prefix pages vs 3 dense copies).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # a plain checkout works without installing

from wgc_runtime.engines import PagedKVPool  # noqa: E402
from wgc_runtime.engines.attention import make_backend, prepare_step  # noqa: E402

LABELS = ("main", "cfg_text", "cfg_img")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class Paged:
    def __init__(self, a, prefix_kv, share: bool):
        self.a = a
        pages = 3 * (a.prefix + a.steps * a.query_tokens + a.warmup * a.query_tokens) // 16 + 16
        self.pool = PagedKVPool(
            layers=a.layers,
            kv_heads=a.kv_heads,
            head_dim=a.head_dim,
            pages=pages,
            page_size=16,
            labels=LABELS,
        )
        self.be = make_backend(
            "torch", num_heads=a.heads, num_kv_heads=a.kv_heads, head_dim=a.head_dim, page_size=16
        )
        slots = self.pool.append("r", "main", a.prefix)
        for layer, (k, v) in enumerate(prefix_kv):
            self.be.write_kv(
                self.pool.layer(layer), k[0].transpose(0, 1), v[0].transpose(0, 1), slots
            )
        for label in LABELS[1:]:
            self.pool.fork("r", "main", label, share=share)

    def step(self, qs, ks, vs):
        """qs[layer]: [3 * n, heads, dim] (branches in LABELS order); ks/vs: [3 * n, kv, dim]."""
        meta = prepare_step(self.pool, [("r", lab, self.a.query_tokens) for lab in LABELS])
        self.be.plan(meta)
        outs = []
        for layer in range(self.a.layers):
            kv = self.pool.layer(layer)
            self.be.write_kv(kv, ks[layer], vs[layer], meta.slot_mapping)
            outs.append(self.be.forward(qs[layer], kv, meta))
        return outs


class Dense:
    def __init__(self, a, prefix_kv):
        self.a = a
        # three branches, each with its own copy of the prefix (per layer K and V)
        self.k = [[k.clone() for k, _ in prefix_kv] for _ in LABELS]
        self.v = [[v.clone() for _, v in prefix_kv] for _ in LABELS]

    def step(self, qs, ks, vs):
        n, outs = self.a.query_tokens, []
        for layer in range(self.a.layers):
            per_branch = []
            for b in range(len(LABELS)):
                rows = slice(b * n, (b + 1) * n)
                k_new = ks[layer][rows].transpose(0, 1).unsqueeze(0)  # [1, kv, n, dim]
                v_new = vs[layer][rows].transpose(0, 1).unsqueeze(0)
                self.k[b][layer] = torch.cat([self.k[b][layer], k_new], dim=2)
                self.v[b][layer] = torch.cat([self.v[b][layer], v_new], dim=2)
                q = qs[layer][rows].transpose(0, 1).unsqueeze(0)  # [1, heads, n, dim]
                length = self.k[b][layer].shape[2]
                mask = None
                if n > 1:
                    rows_pos = torch.arange(length - n, length)[:, None]
                    mask = torch.arange(length)[None, :] <= rows_pos
                o = F.scaled_dot_product_attention(
                    q,
                    self.k[b][layer],
                    self.v[b][layer],
                    attn_mask=mask,
                    enable_gqa=self.a.heads != self.a.kv_heads,
                )
                per_branch.append(o[0].transpose(0, 1))
            outs.append(torch.cat(per_branch))
        return outs


def step_inputs(a, gen):
    rows = len(LABELS) * a.query_tokens
    out = []
    for _ in range(a.warmup + a.steps):
        qs = [torch.randn(rows, a.heads, a.head_dim, generator=gen) for _ in range(a.layers)]
        ks = [torch.randn(rows, a.kv_heads, a.head_dim, generator=gen) for _ in range(a.layers)]
        vs = [torch.randn(rows, a.kv_heads, a.head_dim, generator=gen) for _ in range(a.layers)]
        out.append((qs, ks, vs))
    return out


def cfg_step(a) -> dict:
    gen = torch.Generator().manual_seed(0)
    prefix_kv = [
        (
            torch.randn(1, a.kv_heads, a.prefix, a.head_dim, generator=gen),
            torch.randn(1, a.kv_heads, a.prefix, a.head_dim, generator=gen),
        )
        for _ in range(a.layers)
    ]
    inputs = step_inputs(a, gen)
    results: dict[str, list[float]] = {}
    outs = {}
    builders = {
        "dense (torch.cat per step)": lambda: Dense(a, prefix_kv),
        "paged labels (shared prefix)": lambda: Paged(a, prefix_kv, share=True),
        "paged labels (unshared fork)": lambda: Paged(a, prefix_kv, share=False),
    }
    for rep in range(a.repeats):
        engines = {name: build() for name, build in builders.items()}
        names = list(engines)
        for i, (qs, ks, vs) in enumerate(inputs):
            # interleave the variants step by step (rotating who goes first), so the machine's
            # load drifts over all of them alike
            k = (i + rep) % len(names)
            for name in names[k:] + names[:k]:
                t0 = time.perf_counter()
                outs[name] = engines[name].step(qs, ks, vs)
                if i >= a.warmup:
                    results.setdefault(name, []).append(time.perf_counter() - t0)
    ref = outs["dense (torch.cat per step)"]
    for name, last in outs.items():
        err = max((x - y).abs().max().item() for x, y in zip(last, ref, strict=True))
        assert err < 1e-4, f"{name} disagrees with the dense baseline: {err}"
    return {name: (statistics.median(t), min(t)) for name, t in results.items()}


def memory(a) -> dict:
    rng = random.Random(0)
    lengths = [rng.randint(64, 2048) for _ in range(16)]
    per_token = a.layers * 2 * a.kv_heads * a.head_dim * 4  # f32 K and V over all layers
    pool = PagedKVPool(
        layers=a.layers,
        kv_heads=a.kv_heads,
        head_dim=a.head_dim,
        pages=sum(lengths) // 16 + 32,
        page_size=16,
    )
    for i, n in enumerate(lengths):
        pool.append(i, "main", n)
    cfg = PagedKVPool(
        layers=a.layers,
        kv_heads=a.kv_heads,
        head_dim=a.head_dim,
        pages=3 * a.prefix // 16 + 8,
        page_size=16,
    )
    cfg.append("r", "main", a.prefix + 7)
    for label in LABELS[1:]:
        cfg.fork("r", "main", label)
    return {
        "lengths": lengths,
        "paged": pool.bytes_held(),
        "dense_padded": 16 * max(lengths) * per_token,
        "dense_exact": sum(lengths) * per_token,
        "cfg_paged": cfg.bytes_held(),
        "cfg_dense": 3 * (a.prefix + 7) * per_token,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", type=int, default=1024)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=28)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--query-tokens", type=int, default=1, help="tokens per branch per step")
    p.add_argument(
        "--markdown", type=Path, help="write this run's tables there (benchmarks/all.py)"
    )
    a = p.parse_args()
    load_before = os.getloadavg()[0]

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"before: {uptime()}")
    print(
        f"geometry: {a.layers} layers, {a.heads} heads / {a.kv_heads} kv heads × {a.head_dim}, "
        f"f32, page 16, prefix {a.prefix}, {a.query_tokens} token(s) per branch per step, "
        f"median of {a.steps}×{a.repeats} steps"
    )
    res = cfg_step(a)
    base, base_min = res["dense (torch.cat per step)"]
    print("\none CFG step (3 branches, all layers): median (min)")
    for name, (t, t_min) in res.items():
        print(
            f"  {name:30s} {t * 1e3:8.2f} ms ({t_min * 1e3:7.2f})   "
            f"{base / t:5.2f}× vs dense ({base_min / t_min:4.2f}× on min)"
        )
    m = memory(a)
    mib = 1 / 2**20
    print(
        f"\nmemory, 16 requests of lengths {min(m['lengths'])}..{max(m['lengths'])} "
        f"(sum {sum(m['lengths'])}), {a.layers} layers:"
    )
    print(f"  paged (pages in use)        {m['paged'] * mib:9.1f} MiB")
    print(
        f"  dense padded to max length  {m['dense_padded'] * mib:9.1f} MiB   "
        f"{m['dense_padded'] / m['paged']:.2f}× paged"
    )
    print(f"  dense exact (no padding)    {m['dense_exact'] * mib:9.1f} MiB")
    print(f"memory, CFG 3 branches over a {a.prefix + 7}-token context:")
    print(f"  paged labels (forked)       {m['cfg_paged'] * mib:9.1f} MiB")
    print(
        f"  3 dense caches              {m['cfg_dense'] * mib:9.1f} MiB   "
        f"{m['cfg_dense'] / m['cfg_paged']:.2f}× paged"
    )
    print(f"\nafter: {uptime()}")
    if a.markdown:
        a.markdown.write_text(markdown(a, res, m, (load_before, os.getloadavg()[0])))


def markdown(a, res: dict, m: dict, loads: tuple[float, float]) -> str:
    """This run's step and memory tables, the README's columns."""
    base, base_min = res["dense (torch.cat per step)"]
    cells = []
    order = [
        "dense (torch.cat per step)",
        "paged labels (shared prefix)",
        "paged labels (unshared fork)",
    ]
    for name in order:
        t, t_min = res[name]
        cell = f"{t * 1e3:.1f} ms ({t_min * 1e3:.1f})"
        if name != "dense (torch.cat per step)":
            cell += f": **{base / t:.2f}×** ({base_min / t_min:.2f}× on min)"
        cells.append(cell)
    mib = 1 / 2**20
    lengths = m["lengths"]
    return "\n".join(
        [
            "| run (load before → after) | dense `torch.cat` | paged, shared prefix "
            "| paged, unshared fork |",
            "| --- | --- | --- | --- |",
            f"| 1 ({loads[0]:.2f} → {loads[1]:.2f}) | " + " | ".join(cells) + " |",
            "",
            f"Memory (bytes of K/V held, {a.layers} layers, f32):",
            "",
            "| case | paged | dense | ratio |",
            "| --- | --- | --- | --- |",
            f"| 16 requests, lengths {min(lengths)}..{max(lengths)} (sum {sum(lengths):,}) "
            f"| {m['paged'] * mib:.1f} MiB (pages in use) "
            f"| {m['dense_padded'] * mib:.1f} MiB padded to max length "
            f"({m['dense_exact'] * mib:.1f} MiB unpadded) "
            f"| {m['dense_padded'] / m['paged']:.2f}× |",
            f"| CFG: 3 branches over a {a.prefix + 7:,}-token context "
            f"| {m['cfg_paged'] * mib:.1f} MiB (forked labels) "
            f"| {m['cfg_dense'] * mib:.1f} MiB (3 dense caches) "
            f"| {m['cfg_dense'] / m['cfg_paged']:.2f}× |",
            "",
        ]
    )


if __name__ == "__main__":
    main()
