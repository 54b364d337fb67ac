"""Attention backends over the paged pool: the torch reference against a dense attention,
labels isolating in attention outputs, metadata, backend selection, and the Triton kernels under
the Triton interpreter (in a subprocess: ``TRITON_INTERPRET`` must be set before triton loads).
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from wgc_runtime.engines import PagedKVPool
from wgc_runtime.engines.attention import (
    AttentionMetadata,
    BackendUnavailable,
    make_backend,
    prepare_step,
    resolve,
)
from wgc_runtime.engines.attention.torch_backend import TorchAttention


def dense_reference(q, k, v, positions, scale):
    """Plain causal GQA attention of queries at ``positions`` over k/v ``[len, kv_heads, d]``."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    s = torch.einsum("qhd,khd->hqk", q.double(), k) * scale
    visible = torch.arange(k.shape[0])[None, :] <= positions[:, None]
    s = s.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v)


def run_steps(backend, pool, steps, *, heads, seed=0):
    """Run batched steps (lists of (request, label, q_len)); compare every output with the dense
    reference of each sequence; returns the worst error."""
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    for batch in steps:
        meta = prepare_step(pool, batch)
        n = meta.total_q
        q = torch.randn(n, heads, pool.head_dim, generator=gen)
        k = torch.randn(n, pool.kv_heads, pool.head_dim, generator=gen)
        v = torch.randn(n, pool.kv_heads, pool.head_dim, generator=gen)
        layer = pool.layer(0)
        backend.write_kv(layer, k, v, meta.slot_mapping)
        backend.plan(meta)
        out = backend.forward(q, layer, meta)
        start = 0
        for r, label, q_len in batch:
            kk, vv = pool.gather(r, label)
            rows = slice(start, start + q_len)
            ref = dense_reference(q[rows], kk, vv, meta.positions[rows], backend.scale)
            worst = max(worst, (out[rows].double() - ref).abs().max().item())
            start += q_len
    return worst


def make(pool, heads, name="torch", **kw):
    return make_backend(
        name,
        num_heads=heads,
        num_kv_heads=pool.kv_heads,
        head_dim=pool.head_dim,
        page_size=pool.page_size,
        dtype=pool.dtype,
        **kw,
    )


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (6, 1)])
def test_torch_prefill_then_decode_matches_dense(heads, kv_heads):
    pool = PagedKVPool(layers=1, kv_heads=kv_heads, head_dim=8, pages=64, page_size=4)
    be = make(pool, heads)
    steps = [
        [("a", "main", 7), ("b", "main", 1), ("c", "main", 12)],  # ragged prefill
        [("a", "main", 1), ("b", "main", 1), ("c", "main", 1)],  # decode
        [("a", "main", 3), ("c", "main", 1)],  # chunked prefill next to a decode
        [("b", "main", 1)],
    ]
    assert run_steps(be, pool, steps, heads=heads) < 1e-5


def test_torch_custom_scale():
    pool = PagedKVPool(layers=1, kv_heads=2, head_dim=8, pages=16, page_size=4)
    be = make(pool, 4, scale=0.3)
    assert be.scale == 0.3
    assert run_steps(be, pool, [[("a", "main", 5)], [("a", "main", 1)]], heads=4) < 1e-5


def test_torch_decode_shared_and_padded_layouts_agree():
    """CFG-style labels forked from `main` share pages (shared layout); disjoint requests use
    the padded layout. Both must match the dense reference."""
    pool = PagedKVPool(layers=1, kv_heads=2, head_dim=8, pages=128, page_size=4)
    be = make(pool, 4)
    assert run_steps(be, pool, [[("r", "main", 13)]], heads=4) < 1e-5
    pool.fork("r", "main", "cfg_text")
    pool.fork("r", "main", "cfg_img")
    cfg = [("r", "main", 1), ("r", "cfg_text", 1), ("r", "cfg_img", 1)]
    meta = prepare_step(pool, cfg)
    be.plan(meta)
    assert be._plan[0] == "shared"  # pyright: ignore[reportAttributeAccessIssue] (a private plan)
    assert run_steps(be, pool, [cfg] * 5, heads=4, seed=1) < 1e-5
    # disjoint long sequences: padded layout
    for i in range(4):
        pool.append(f"d{i}", "main", 9)
    disjoint = [(f"d{i}", "main", 1) for i in range(4)]
    be.plan(prepare_step(pool, disjoint))
    assert be._plan[0] == "padded"  # pyright: ignore[reportAttributeAccessIssue] (a private plan)
    assert run_steps(be, pool, [disjoint] * 3, heads=4, seed=2) < 1e-5


def test_torch_bf16_pool_within_dtype_tolerance():
    pool = PagedKVPool(
        layers=1, kv_heads=2, head_dim=16, pages=32, page_size=8, dtype=torch.bfloat16
    )
    be = make(pool, 4)
    steps = [[("a", "main", 9), ("b", "main", 4)], [("a", "main", 1), ("b", "main", 1)]]
    assert run_steps(be, pool, steps, heads=4) < 5e-2


def test_a_query_of_one_label_never_sees_another_labels_pages():
    pool = PagedKVPool(
        layers=1, kv_heads=1, head_dim=4, pages=16, page_size=4, labels=("main", "cfg_img")
    )
    be = make(pool, 2)
    layer = pool.layer(0)
    for label, value in (("main", 1.0), ("cfg_img", -1.0)):
        slots = pool.append("r", label, 6)
        kv = torch.full((6, 1, 4), value)
        be.write_kv(layer, kv, kv, slots)
    for label, value in (("main", 1.0), ("cfg_img", -1.0)):
        for q_len in (1, 2):  # decode and prefill paths
            meta = AttentionMetadata.from_tables(
                [pool.page_table("r", label)], [6], [q_len], pool.page_size
            )
            out = be.forward(torch.randn(q_len, 2, 4), layer, meta)
            assert torch.allclose(out, torch.full_like(out, value))
    # both labels in one batch: each row still sees only its own label
    meta = AttentionMetadata.from_tables(
        [pool.page_table("r", "main"), pool.page_table("r", "cfg_img")], [6, 6], [1, 1], 4
    )
    out = be.forward(torch.randn(2, 2, 4), layer, meta)
    assert torch.allclose(out[0], torch.ones(2, 4)) and torch.allclose(out[1], -torch.ones(2, 4))


def test_metadata_csr_and_block_tables():
    meta = AttentionMetadata.from_tables([[5, 2, 7], [1]], [9, 3], [2, 1], 4)
    assert meta.qo_indptr.tolist() == [0, 2, 3]
    assert meta.kv_indptr.tolist() == [0, 3, 4]
    assert meta.kv_indices.tolist() == [5, 2, 7, 1]
    assert meta.kv_last_page_len.tolist() == [1, 3]
    assert meta.block_tables.tolist() == [[5, 2, 7], [1, 0, 0]]
    assert meta.positions.tolist() == [7, 8, 2]
    assert not meta.is_decode and meta.max_q_len == 2 and meta.max_kv_len == 9
    with pytest.raises(ValueError, match="bad sequence"):
        AttentionMetadata.from_tables([[1]], [9], [1], 4)


def test_forward_checks_shapes_and_plan():
    be = TorchAttention(num_heads=2, num_kv_heads=1, head_dim=4, page_size=4)
    with pytest.raises(RuntimeError, match="before plan"):
        be.forward(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4, 1, 4))
    meta = AttentionMetadata.from_tables([[0]], [3], [1], 4)
    with pytest.raises(ValueError, match="q is"):
        be.forward(torch.zeros(2, 2, 4), torch.zeros(1, 2, 4, 1, 4), meta)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        TorchAttention(num_heads=3, num_kv_heads=2, head_dim=4, page_size=4)


def test_selection():
    assert resolve("auto", "cpu") == "torch"
    assert resolve("torch", "cpu") == "torch"
    with pytest.raises(BackendUnavailable, match="`flashinfer` cannot run on `cpu`"):
        resolve("flashinfer", "cpu")
    with pytest.raises(ValueError, match="unknown attention backend `xformers`"):
        resolve("xformers")
    if not os.environ.get("TRITON_INTERPRET"):
        with pytest.raises(BackendUnavailable, match="`triton`"):
            resolve("triton", "cpu")


# ---------------------------------------------------------------- triton under the interpreter

TRITON_SCRIPT = textwrap.dedent(
    """
    import os, sys
    assert os.environ["TRITON_INTERPRET"] == "1"
    import torch
    sys.path.insert(0, sys.argv[1])
    from test_attention_backends import make, run_steps
    from wgc_runtime.engines.attention import prepare_step
    from wgc_runtime.engines import PagedKVPool

    # page 4 / dim 8: the broadcast-sum path; page 16 / dim 16: the tl.dot path
    for page, dim, heads, kv_heads in ((4, 8, 4, 2), (16, 16, 4, 1), (4, 6, 2, 2)):
        pool = PagedKVPool(layers=1, kv_heads=kv_heads, head_dim=dim, pages=48, page_size=page)
        steps = [
            [("a", "main", 7), ("b", "main", 1), ("c", "main", 20)],
            [("a", "main", 1), ("b", "main", 1), ("c", "main", 1)],
            [("a", "main", 3), ("c", "main", 1)],
        ]
        err = run_steps(make(pool, heads, "triton"), pool, steps, heads=heads)
        print(page, dim, heads, kv_heads, err)
        assert err < 1e-5, err
    print("ok")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None,
    reason="triton (and numpy) not installed: the Triton interpreter test needs them",
)
def test_triton_kernels_match_dense_under_the_interpreter(tmp_path):
    script = tmp_path / "triton_check.py"
    script.write_text(TRITON_SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run(
        [sys.executable, str(script), here], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_dense_reference_is_plain_softmax_attention():
    q, k, v = torch.randn(1, 1, 4), torch.randn(3, 1, 4), torch.randn(3, 1, 4)
    ref = dense_reference(q, k, v, torch.tensor([2]), 0.5)
    w = torch.softmax((k[:, 0] @ q[0, 0]) * 0.5, 0)
    assert torch.allclose(ref[0, 0].float(), w @ v[:, 0], atol=1e-6)
    assert math.isclose(float(w.sum()), 1.0, rel_tol=1e-6)
