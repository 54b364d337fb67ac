"""A ``like X { label L }`` copy reads what X wrote into label L, wherever the placement puts
them: the compiled runtime gives exactly the interpreter's outputs on `kv_toy`'s model under
placements that read X's pool in place (one rank), copy the label to another rank, and copy it
while X's own pages move between ranks (prefill/decode split) — to the rank that runs X's
decode, or to a third rank.

The last two pin two bugs: a copy on a rank where X runs *other* walks was planned to read X's
pool there (``shared``), which is empty when X's state lives elsewhere (it attended to zeros);
and a walk that both moves X's state away from a rank and copies X's label from it must copy
first (the conductor's messages to a rank arrive in order: copy, then export).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from kv_toy import CLASSES, PLACEMENTS, WALK, as_outputs, compile_into, nodes

from wgc.interp import load_model, make_request, node_context, run_request, same_outputs, segment
from wgc_runtime.host.local import LocalCluster

SETTINGS = "kv_cache: {page_size: 4, pages: 64, dtype: f32}\nbatching: {max_batch: 4}\n"
# per placement: whether the copy reads LLM's pool in place, and the label copies of `gen`
PLANNED = {
    "one-rank": (True, ()),
    "cfg-on-rank-1": (False, (("LLM", "cfg", "LLM_cfg", (1,)),)),
    "decode-on-rank-1": (False, (("LLM", "cfg", "LLM_cfg", (1,)),)),
    "decode-on-rank-1-cfg-on-rank-2": (False, (("LLM", "cfg", "LLM_cfg", (2,)),)),
}


def rows(n: int, seed: int) -> torch.Tensor:
    return torch.rand(n, 4, generator=torch.Generator().manual_seed(seed))


REQUESTS = {  # id -> (segments, wants, eos_after)
    "text-and-tensor": ([rows(3, 1)], ["text", "tensor"], 3),
    "two-segments": ([rows(2, 2), rows(4, 3)], ["text", "tensor"], 5),
    "tensor-only": ([rows(4, 4)], ["tensor"], 1),
    "text-only": ([rows(1, 5)], ["text"], 6),
}


@pytest.mark.parametrize("name", sorted(PLACEMENTS))
def test_a_copy_reads_its_owners_label_on_every_placement(tmp_path, name) -> None:
    (tmp_path / "kvtoy.walk").write_text(WALK)
    (tmp_path / f"{name}.yaml").write_text(PLACEMENTS[name] + SETTINGS)
    folder = compile_into(tmp_path, tmp_path / "kvtoy.walk", tmp_path / f"{name}.yaml")
    c = LocalCluster(folder, nodes_factory=nodes)
    copy_spec = next(n.kv for r in c.ranks.values() for n in r.spec.nodes if n.name == "LLM_cfg")
    gen = next(w for w in c.spec.walks if w.name == "gen")
    copies = tuple((k.owner, k.label, k.node, k.to_ranks) for k in gen.kv_copies)
    assert copy_spec is not None
    assert (copy_spec.shared, copies) == PLANNED[name]

    model = load_model(str(tmp_path / "kvtoy.walk"))
    made = {
        rid: make_request(model, [segment("tensor", s) for s in segs], wants, {"eos_after": eos})
        for rid, (segs, wants, eos) in REQUESTS.items()
    }
    handles = {rid: c.submit(req, rid) for rid, req in made.items()}  # side by side
    c.run()
    for rid, req in made.items():
        interp_nodes = {n.name: CLASSES[n.name](node_context(n)) for n in model.nodes}
        ref = run_request(model, req, interp_nodes, request_id=rid)
        assert ref.error is None, ref.error
        assert same_outputs(ref, as_outputs(handles[rid])), (name, rid)
    for ex in c.ranks.values():
        ex.kv.check()
        assert set(ex.kv.used_pages().values()) <= {0} and not ex.requests
