"""The engines on the compiled path on a GPU: `wgc_models/llama` on `placements/1gpu.yaml` (the
decoder's K/V in the runtime's pool on the device, decode steps batched across requests and
replayed as the plan's CUDA graphs, one per bucket, recorded at worker start) gives the same
tokens as the same plan with capture off, and every page comes back.

Marked `gpu`; skipped without CUDA (``benchmarks/gpu_check.sh`` runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc.driver import Driver  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
WALK = ROOT / "wgc_models" / "llama" / "llama.walk"
PROMPTS = [f"gpu prompt {i}: " + "xyz" * i for i in range(12)]


def _plan(tmp: Path, batching: str) -> Path:
    placement = tmp / "gpu.yaml"
    placement.write_text(
        "devices: [cuda:0]\nplace:\n  - nodes: [LLM]\n    ranks: [0]\n"
        "kv_cache: {page_size: 16, pages: 1024, dtype: f32}\n"
        f"batching: {batching}\nmax_concurrent_requests: 16\n"
    )
    result = Driver().compile(str(WALK), str(placement), {"eos": "-1"})
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp / name).write_text(text)
    return tmp


def _serve(folder: Path) -> tuple[LocalCluster, list[list[int]]]:
    c = LocalCluster(folder)
    hs = [c.submit(c.request([Segment("text", p)], ["text"])) for p in PROMPTS]
    c.run()
    out = []
    for h in hs:
        assert h.error is None, h.error
        out.append([int(o.tensor) for o in h.outputs])
    return c, out


def test_captured_decode_on_the_gpu_equals_capture_off(tmp_path) -> None:
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    c, captured = _serve(_plan(tmp_path / "on", "{max_batch: 16, capture: [1, 2, 4, 8, 16]}"))
    _, plain = _serve(_plan(tmp_path / "off", "{max_batch: 16, capture: []}"))
    assert captured == plain
    ex = c.ranks[0]
    [unit] = ex.captured.units[("decode", 0)]
    assert unit.runner.backend == "cuda_graph" and unit.runner.replays > 0
    assert ex.captured.fallbacks == 0 and max(ex.captured.batch_sizes) == len(PROMPTS)
    assert ex.kv.used_pages() == {"LLM": 0}
    ex.kv.check()
