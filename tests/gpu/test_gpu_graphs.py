"""The CUDA-graph runner on a GPU: captured replay equals eager, and the decoder's captured
decode loop (continuous batching over real graphs) equals the plain path.

Marked `gpu`; skipped without CUDA. Run with ``pytest -m gpu tests/gpu``
(``benchmarks/gpu_check.sh``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.decode_engine import DecoderEngine
from wgc_models.layers.decoder import LlamaDecoder
from wgc_runtime.engines.batching import ContinuousBatcher, GenRequest
from wgc_runtime.engines.capture import GraphRunner, StaticBuffer, shared_pool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CFG = DecoderConfig(
    vocab_size=256,
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
)


def test_replay_equals_eager_at_every_bucket():
    def fn(bufs):
        return {"y": torch.softmax(bufs["x"] @ bufs["x"].T, -1) @ bufs["x"] + bufs["b"]}

    inputs = {"x": StaticBuffer((16,), torch.float32, 0.0), "b": StaticBuffer((16,), torch.float32)}
    pool = shared_pool("cuda")
    graph = GraphRunner(fn, inputs, (1, 4, 8), device="cuda", pool=pool).capture()
    eager = GraphRunner(fn, inputs, (1, 4, 8), device="cuda", capture=False).capture()
    for batch in (1, 3, 4, 7, 8):
        x, b = torch.randn(batch, 16, device="cuda"), torch.randn(batch, 16, device="cuda")
        got = graph.run({"x": x, "b": b}, batch)["y"].clone()
        want = eager.run({"x": x, "b": b}, batch)["y"]
        torch.testing.assert_close(got, want)
    assert graph.replays == 5 and graph.eager_runs == 0


def _backends():
    out = ["torch"]
    if importlib.util.find_spec("triton") is not None:
        out.append("triton")
    return out


@pytest.mark.parametrize("backend", _backends())
def test_captured_decode_loop_equals_plain_path(backend):
    torch.manual_seed(0)
    model = LlamaDecoder(CFG).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    model = model.cuda()
    kind = None
    if backend == "triton":
        from wgc_runtime.engines.attention.triton_backend import TritonAttention

        kind = TritonAttention
    g = torch.Generator().manual_seed(1)
    work = [
        (torch.randint(0, 256, (int(torch.randint(1, 40, (1,), generator=g)),), generator=g), n)
        for n in (5, 30, 12, 1, 25, 18, 9, 30, 3, 22)
    ]
    results = {}
    for capture in (False, True):
        engine = DecoderEngine.build(model, pages=256, page_size=16, backend=kind)
        b = ContinuousBatcher(
            engine, max_batch=4, max_seq_len=80, capture=capture, keep_logits=True
        )
        reqs = [GenRequest(i, p.cuda(), n) for i, (p, n) in enumerate(work)]
        b.run(reqs)
        b.close()
        results[capture] = reqs
        if capture:
            assert b.runner.replays > 0 and b.runner.eager_runs == 0
    for got, ref in zip(results[True], results[False], strict=True):
        assert got.tokens == ref.tokens
        for a, c in zip(got.logits, ref.logits, strict=True):
            torch.testing.assert_close(a, c, atol=1e-3, rtol=1e-3)
