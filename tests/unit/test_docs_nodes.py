"""The node API page's example runs: `docs/nodes.md`'s ```walk model compiles clean (in
`wgc fmt`'s layout), and its ```python node, built by the compiled runtime on a one-rank plan,
appends through ``ctx.kv`` and attends over the request's tokens across walks, as attention
computed by hand says."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from wgc.driver import Driver
from wgc.fmt import format_source
from wgc_runtime.contract.flow import Segment
from wgc_runtime.host.loading import node_context
from wgc_runtime.host.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "nodes.md"
PLACEMENT = """\
devices: [cpu]
place:
  - nodes: [LM]
    ranks: [0]
kv_cache: {page_size: 4, pages: 32, dtype: f32}
"""


def block(lang: str) -> str:
    (found,) = re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    return found


def test_the_example_model_compiles_clean_and_is_formatted() -> None:
    source = block("walk")
    result = Driver().front_end("nodes.walk", source)
    assert result.model is not None and not result.diagnostics, result.diagnostics
    assert format_source(source, "nodes.walk").text == source


def reference(tokens: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v per head, causal over every token so far (the example's keys
    are the one-hot tokens, its values their tanh)."""
    x = torch.nn.functional.one_hot(tokens % 8, 8).float().reshape(-1, 2, 4)  # [n, heads, d]
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        for h in range(2):
            scores = x[: t + 1, h] @ x[t, h] / math.sqrt(4)
            out[t, h] = torch.softmax(scores, 0) @ torch.tanh(x[: t + 1, h])
    return out.reshape(-1, 8)


def test_the_example_node_runs_on_the_compiled_runtime(tmp_path) -> None:
    namespace: dict = {}
    exec(compile(block("python"), str(DOC), "exec"), namespace)
    tiny_lm = namespace["TinyLM"]
    (tmp_path / "tiny_lm.walk").write_text(block("walk"))
    (tmp_path / "cpu.yaml").write_text(PLACEMENT)
    res = Driver().compile(str(tmp_path / "tiny_lm.walk"), str(tmp_path / "cpu.yaml"))
    assert res.ok, [(d.code, d.message) for d in res.diagnostics if d.is_error]
    out = tmp_path / "out"
    out.mkdir()
    for name, text in res.files.items():
        (out / name).write_text(text)
    c = LocalCluster(
        out, nodes_factory=lambda r: {n.name: tiny_lm(node_context(r, n)) for n in r.nodes}
    )
    first, second = torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9, 2, 6])
    request = c.request([Segment("tokens", first), Segment("tokens", second)], ["tensor"])
    h = c.submit(request).result()
    assert h.ok, h.error
    assert [o.modality for o in h.outputs] == ["tensor", "tensor"]
    want = reference(torch.cat([first, second]))
    torch.testing.assert_close(h.outputs[0].tensor, want[: len(first)])
    torch.testing.assert_close(h.outputs[1].tensor, want[len(first) :])  # reads the first too
    assert c.ranks[0].kv.used_pages() == {"LM": 0}  # freed when the request ended
