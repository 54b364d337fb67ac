"""A node whose class says so (`Node.serves_copies`) gets its ``like`` copies' ready calls in its
own batches when a copy reads its pool on the same rank: on `kv_toy`'s model the CFG-parallel
walk's two passes (``LLM`` on ``main``, ``LLM_cfg`` on ``cfg``) run as one `forward` per step,
for every request at once, and the outputs stay the interpreter's. A copy on another rank, or a
class that does not say so, is never merged."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from kv_toy import CLASSES, PLACEMENTS, WALK, Combine, as_outputs, compile_into
from kv_toy import LLM as ToyLLM

from wgc.interp import load_model, make_request, node_context, run_request, same_outputs, segment
from wgc_runtime.contract.node import Node
from wgc_runtime.host.loading import node_context as rank_node_context
from wgc_runtime.host.local import LocalCluster

SETTINGS = "kv_cache: {page_size: 4, pages: 64, dtype: f32}\nbatching: {max_batch: 4}\n"
ONE_RANK, TWO_RANKS = PLACEMENTS["one-rank"], PLACEMENTS["cfg-on-rank-1"]


def recording(serves: bool, batches: list[tuple[str, ...]]) -> type[Node]:
    """The toy LLM, batched, appending to ``batches`` which nodes' calls each `forward` got."""

    class Recording(ToyLLM):
        serves_copies = serves

        def forward(self, batch):
            batches.append(tuple(sorted(w.ctx.node for w in batch)))
            return [self.forward_one(w.inputs, w.ctx) for w in batch]

    return Recording


def run(tmp_path: Path, placement: str, serves: bool, n: int = 3):
    (tmp_path / "kvtoy.walk").write_text(WALK)
    (tmp_path / "p.yaml").write_text(placement + SETTINGS)
    folder = compile_into(tmp_path, tmp_path / "kvtoy.walk", tmp_path / "p.yaml")
    batches: list[tuple[str, ...]] = []
    cls = recording(serves, batches)
    classes = {"LLM": cls, "LLM_cfg": cls, "combine": Combine}

    def nodes(rank):
        return {s.name: classes[s.name](rank_node_context(rank, s)) for s in rank.nodes}

    c = LocalCluster(folder, nodes_factory=nodes)
    model = load_model(str(tmp_path / "kvtoy.walk"))
    made = {
        f"r{i}": make_request(model, [segment("tensor", _rows(i))], ["tensor"], {})
        for i in range(n)
    }
    handles = {rid: c.submit(req, rid) for rid, req in made.items()}
    c.run()
    for rid, req in made.items():
        interp = {s.name: CLASSES[s.name](node_context(s)) for s in model.nodes}
        ref = run_request(model, req, interp, request_id=rid)
        assert ref.error is None and handles[rid].ok, (ref.error, handles[rid].error)
        assert same_outputs(ref, as_outputs(handles[rid])), rid
    for ex in c.ranks.values():
        assert set(ex.kv.used_pages().values()) <= {0} and not ex.requests
    return batches, c


def _rows(i: int) -> torch.Tensor:
    return torch.rand(3, 4, generator=torch.Generator().manual_seed(i))


def test_the_copies_passes_run_in_the_owners_batches(tmp_path) -> None:
    batches, c = run(tmp_path, ONE_RANK, serves=True)
    denoise = [b for b in batches if "LLM_cfg" in b]
    assert denoise and all("LLM" in b for b in denoise)  # never a batch of the copy alone
    assert max(len(b) for b in denoise) == 6  # 3 requests x 2 passes in one forward
    assert sum(b.count("LLM_cfg") for b in denoise) == 3 * 3  # 3 steps of 3 requests
    stats = c.ranks[0].stats
    assert {n: s.rows for n, s in stats.nodes.items() if n.startswith("LLM")} == {
        "LLM": 3 + 3 * 3,  # prefill, then one pass per step
        "LLM_cfg": 3 * 3,
    }


@pytest.mark.parametrize(("placement", "serves"), [(ONE_RANK, False), (TWO_RANKS, True)])
def test_never_merged_without_the_class_or_across_ranks(tmp_path, placement, serves) -> None:
    batches, _ = run(tmp_path, placement, serves)
    assert all(len(set(b)) == 1 for b in batches)  # each forward: one node's calls
    assert any("LLM_cfg" in b for b in batches)
