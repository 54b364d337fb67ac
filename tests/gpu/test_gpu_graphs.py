"""The CUDA-graph runner on a GPU: captured replay equals eager at every bucket (a served
decoder's captured decode steps against capture off are `test_gpu_compiled_path.py`'s; the
check that drove the decoder through the removed ``ContinuousBatcher`` went with it).

Marked `gpu`; skipped without CUDA. Run with ``pytest -m gpu tests/gpu``
(``benchmarks/gpu_check.sh``).
"""

from __future__ import annotations

import pytest
import torch

from wgc_runtime.engines.capture import GraphRunner, StaticBuffer, shared_pool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


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
