"""A `like X { label L writable }` copy (a draft model's sequence in the trunk's pool): lowered
as a shared, writable pool spec on X's only group, served by X's pool on that rank through a
handle that may append, truncate and fork its own label, never X's others; a read-only copy
still refuses to write. The placement rule (WG828) is in tests/ui/placement/."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wgc.driver import Driver
from wgc.fmt import format_source
from wgc.interp.interp import kv_pools
from wgc_runtime.contract.spec import KvCacheSpec
from wgc_runtime.engines.kv_handle import KvReadOnly
from wgc_runtime.engines.kv_pools import KvPools

MODEL = """model spec

param layers = 2

node LLM: kv_cache(labels = [main, draft, uncond]) {
  impl "m:LLM"
  in  tokens: i64[T]
  out next:   i64[1]
  config layers = layers
  config kv_heads = 2
  config head_dim = 4
  config kv_tokens = 64
}

node Draft: like LLM {
  impl "m:Draft"
  label draft writable
}

node Uncond: like LLM { label uncond }

walk generate(tokens: i64[T]) {
  Draft(tokens) -> guess = next
  Uncond(tokens) -> other = next
  LLM(tokens = guess) -> next
  emit next as text
  emit other as tensor
}

flow main {
  for seg in request.inputs {
    match seg.modality {
      text => generate(tokens = seg)
      _    => fail "send a prompt"
    }
  }
}
"""
PLACEMENT = """devices: [cpu]
place:
  - {nodes: [LLM, Draft, Uncond], ranks: [0]}
kv_cache: {page_size: 4, pages: 64, dtype: f32}
"""


def test_writable_is_formatted_and_lowered_as_a_shared_writable_pool(tmp_path: Path) -> None:
    assert format_source(MODEL, "spec.walk").text == MODEL
    (tmp_path / "spec.walk").write_text(MODEL)
    (tmp_path / "p.yaml").write_text(PLACEMENT)
    res = Driver().compile(str(tmp_path / "spec.walk"), str(tmp_path / "p.yaml"))
    assert res.ok and res.plan is not None, [d.message for d in res.diagnostics]
    nodes = {n.name: n for n in res.plan.ranks[0].nodes}
    draft, uncond = nodes["Draft"].kv, nodes["Uncond"].kv
    assert draft is not None and uncond is not None
    assert (draft.owner, draft.labels, draft.shared, draft.writable) == (
        "LLM",
        ("draft",),
        True,
        True,
    )
    assert (uncond.shared, uncond.writable) == (True, False)
    assert "writable=True" in res.files["rank_0.py"]
    pools = KvPools.of_rank(res.plan.ranks[0])
    check_handles(pools)


def test_the_interpreter_serves_the_same_handles() -> None:
    front = Driver().front_end("spec.walk", MODEL)
    assert front.model is not None and not front.errors
    check_handles(kv_pools(front.model, KvCacheSpec(page_size=4, pages=64, dtype="f32")))


def check_handles(pools: KvPools) -> None:
    trunk, draft, uncond = (pools.handle(n, "r") for n in ("LLM", "Draft", "Uncond"))
    assert draft.pool is trunk.pool and uncond.pool is trunk.pool
    k = torch.arange(2 * 6 * 2 * 4, dtype=torch.float32).reshape(2, 6, 2, 4)
    trunk.append(k, k)  # the trunk's `main`
    draft.append(k[:, :5], -k[:, :5])  # the draft's own label of the same pool
    assert (trunk.length("main"), trunk.length("draft"), draft.length()) == (6, 5, 5)
    draft.truncate(3)  # a rejected draft token rewound
    assert trunk.length("draft") == 3 and torch.equal(draft.keys_values(1)[1], -k[1, :3])
    with pytest.raises(KeyError, match="no kv label `main`"):
        draft.append(k, k, "main")  # only its own label
    with pytest.raises(KvReadOnly):
        uncond.append(k, k)
    pools.free("r")
    assert trunk.pool.pages_of("r") == 0
