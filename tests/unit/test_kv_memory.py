"""The KV memory `wgc show --placement` prints (`RankSpec.memory.kv_bytes`, from the pool specs)
is exactly what each rank allocates for its pools from the same plan, on every generated plan
(devices taken as the CPU: the bytes do not depend on where the pool lives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc_runtime.engines.kv_pools import KvPools
from wgc_runtime.host.loading import load_plan

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted(p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("generated/*/*/plan.json"))


@pytest.mark.parametrize("folder", PLANS)
def test_the_shown_kv_memory_is_what_each_rank_allocates(folder: str) -> None:
    _, ranks = load_plan(ROOT / folder)
    for rank in ranks:
        # on the meta device: the real-size placements' pools are tens of GB (sizes, no memory)
        pools = KvPools.of_rank(rank, device="meta")
        allocated = sum(p.kv.numel() * p.kv.element_size() for p in pools.pools.values())
        assert allocated == rank.memory.kv_bytes, (folder, rank.rank)


def test_some_plan_has_pools() -> None:
    assert any(r.memory.kv_bytes > 0 for folder in PLANS for r in load_plan(ROOT / folder)[1])
