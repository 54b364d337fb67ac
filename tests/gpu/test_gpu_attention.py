"""Attention backends on a GPU: Triton and FlashInfer against the torch reference, over the same
paged pool and page tables (ragged prefill, decode, GQA, CFG labels sharing forked pages).

Marked `gpu`; skipped without CUDA (and FlashInfer cases without the flashinfer package).
Run with ``pytest -m gpu tests/gpu`` (``benchmarks/gpu_check.sh``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from wgc_runtime.engines import PagedKVPool
from wgc_runtime.engines.attention import make_backend, prepare_step

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_FLASHINFER = importlib.util.find_spec("flashinfer") is not None
TOL = {torch.float32: 2e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def steps_for(pool: PagedKVPool):
    """Ragged prefill, decode, mixed chunk, then CFG labels forked from `main` decoding."""
    yield [("a", "main", 37), ("b", "main", 1), ("c", "main", 130), ("d", "main", 16)]
    yield [(r, "main", 1) for r in "abcd"]
    yield [("a", "main", 5), ("c", "main", 64)]
    for label in ("cfg_text", "cfg_img"):
        pool.fork("c", "main", label)
    for _ in range(3):
        yield [("c", lab, 1) for lab in ("main", "cfg_text", "cfg_img")] + [("a", "main", 1)]


def compare(names, dtype, heads, kv_heads, head_dim, page_size=16):
    """Run the same steps through each backend on one pool (write once, read by all)."""
    pool = PagedKVPool(
        layers=1,
        kv_heads=kv_heads,
        head_dim=head_dim,
        pages=512,
        page_size=page_size,
        dtype=dtype,
        device="cuda",
    )
    backends = {
        n: make_backend(
            n,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            device="cuda",
            dtype=dtype,
        )
        for n in names
    }
    gen = torch.Generator(device="cuda").manual_seed(0)
    worst = dict.fromkeys(names[1:], 0.0)
    layer = pool.layer(0)
    for batch in steps_for(pool):
        meta = prepare_step(pool, batch)
        n = meta.total_q
        q = torch.randn(n, heads, head_dim, generator=gen, device="cuda", dtype=dtype)
        k = torch.randn(n, kv_heads, head_dim, generator=gen, device="cuda", dtype=dtype)
        v = torch.randn(n, kv_heads, head_dim, generator=gen, device="cuda", dtype=dtype)
        assert meta.slot_mapping is not None
        backends[names[0]].write_kv(layer, k, v, meta.slot_mapping)
        outs = {}
        for name, be in backends.items():
            be.plan(meta)
            outs[name] = be.forward(q, layer, meta).float()
        ref = outs[names[0]]
        for name in names[1:]:
            worst[name] = max(worst[name], (outs[name] - ref).abs().max().item())
    torch.cuda.synchronize()
    return worst


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(8, 8, 64), (16, 4, 128), (8, 1, 96)])
def test_triton_matches_torch(dtype, heads, kv_heads, head_dim):
    worst = compare(["torch", "triton"], dtype, heads, kv_heads, head_dim)
    assert worst["triton"] < TOL[dtype], worst


@pytest.mark.skipif(not HAS_FLASHINFER, reason="flashinfer not installed")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(8, 8, 64), (16, 4, 128)])
def test_flashinfer_matches_torch(dtype, heads, kv_heads, head_dim):
    names = ["torch", "flashinfer"] + (["triton"] if HAS_TRITON else [])
    worst = compare(names, dtype, heads, kv_heads, head_dim)
    assert all(err < TOL[dtype] for err in worst.values()), worst


def test_auto_picks_a_gpu_backend():
    be = make_backend(
        "auto",
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        page_size=16,
        device="cuda",
        dtype=torch.float16,
    )
    expect = "flashinfer" if HAS_FLASHINFER else "triton" if HAS_TRITON else "torch"
    assert be.name == expect
