"""M*'s current config format loads for every model of `wgc_models/` that M* serves: each
`tests/unit/mstar/<model>.yaml` is written as M*'s configs are (its keys for devices, KV pages,
sequence parallelism, residency, model kwargs), checks against its model with no error, and
lowers."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.placement.check import check_placement

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((Path(__file__).parent / "mstar").glob("*.yaml"))
DRIVER = Driver()


# the examples of models M* serves
MSTAR_MODELS = {"bagel", "qwen3_omni", "orpheus", "vjepa2_ac", "pi05", "whisper", "wan22"}


def test_every_mstar_model_has_a_config() -> None:
    assert {c.stem for c in CONFIGS} == MSTAR_MODELS


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_mstar_config_loads_checks_and_lowers(config: Path) -> None:
    walk = ROOT / "wgc_models" / config.stem / f"{config.stem}.walk"
    front = DRIVER.front_end(str(walk))
    assert front.model is not None and not front.errors
    result = check_placement(front.model, str(config))
    assert result.placement is not None and result.placement.format == "mstar"
    assert not result.errors, [(d.code, d.message) for d in result.errors]
    assert "WG802" not in {d.code for d in result.diagnostics}  # every key is known
    plan = DRIVER.plan(str(walk), str(config))
    assert plan.ok, [(d.code, d.message) for d in plan.errors]


def test_mstar_keys_land_in_the_plan() -> None:
    wan = DRIVER.plan(
        str(ROOT / "wgc_models" / "wan22" / "wan22.walk"),
        str(Path(__file__).parent / "mstar" / "wan22.yaml"),
    )
    assert wan.plan is not None
    nodes = {n.name: n for r in wan.plan.ranks for n in r.nodes}
    assert (nodes["dit_high"].ranks, nodes["dit_high"].sp, nodes["dit_high"].tp) == ((1, 2), 2, 1)
    assert nodes["text_encoder"].sp == 1
    assert [r.device for r in wan.plan.ranks] == [f"auto:{i}" for i in range(5)]
    bagel = check_placement(None, str(Path(__file__).parent / "mstar" / "bagel.yaml")).placement
    assert bagel is not None
    assert bagel.devices == ("auto:0", "auto:1", "auto:1")
    assert (bagel.kv_cache.pages, bagel.kv_cache.page_size, bagel.attention) == (
        4096,
        16,
        "flashinfer",
    )
    assert {"kv_cache.flashinfer_backend", "resources.gpu_memory_utilization"} <= set(
        bagel.ignored_keys
    )
    # model kwargs are optional param overrides (bagel.walk declares no `torch_dtype`: unused)
    kwargs = {(p.name, p.value, p.optional) for p in bagel.params}
    assert kwargs == {
        ("torch_dtype", "bfloat16", True),
        ("attn_implementation", "flash_attention_2", True),
    }
    orpheus = check_placement(None, str(Path(__file__).parent / "mstar" / "orpheus.yaml"))
    assert [d.code for d in orpheus.diagnostics] == ["WG823"]  # on_demand: kept resident


SPEC_MODEL = """model spec
param speculative_tokens = 1
param speculative_draft = "none"
param mtp_heads = 0
node N: stateless {
  impl "m:N"
  config k = speculative_tokens
  config draft = speculative_draft
  config heads = mtp_heads
  out x: f32[4]
}
walk w() { N() -> x  emit x as tensor }
flow main { w() }
"""
SPEC_CONFIG = """model: "spec"
speculative_tokens: 4
speculative_schedule: [4, 4, 2]
speculative_draft: eagle3
model_kwargs: {mtp_heads: 2, torch_dtype: bfloat16, rope: {theta: 10000}}
node_groups:
  - node_names: [N]
    ranks: [0]
"""


def test_speculative_keys_and_model_kwargs_reach_the_nodes(tmp_path: Path) -> None:
    # each scalar sets the model's param of that name (nodes read it through `config`); one
    # the model does not declare, or a list or mapping, is ignored and recorded as such
    (tmp_path / "spec.walk").write_text(SPEC_MODEL)
    (tmp_path / "mstar.yaml").write_text(SPEC_CONFIG)
    res = DRIVER.plan(str(tmp_path / "spec.walk"), str(tmp_path / "mstar.yaml"))
    assert res.plan is not None, [(d.code, d.message) for d in res.errors]
    assert not res.diagnostics, [(d.code, d.message) for d in res.diagnostics]
    (node,) = res.plan.ranks[0].nodes
    assert dict(node.config) == {"k": 4, "draft": "eagle3", "heads": 2}
    placement = check_placement(None, str(tmp_path / "mstar.yaml")).placement
    assert placement is not None
    assert {"speculative_schedule", "model_kwargs.rope"} <= set(placement.ignored_keys)
    # a value of the wrong kind for a declared param is still an error (WG815)
    (tmp_path / "bad.yaml").write_text(
        SPEC_CONFIG.replace("speculative_tokens: 4", "speculative_tokens: many")
    )
    bad = DRIVER.plan(str(tmp_path / "spec.walk"), str(tmp_path / "bad.yaml"))
    assert "WG815" in {d.code for d in bad.errors}


SESSIONS = "sessions:\n  max_sessions: 64\n  max_pages: 512\n"


def test_sessions_keys_reach_the_plan_in_both_formats(tmp_path: Path) -> None:
    wgc_format = "devices: [cpu]\nplace:\n  - nodes: [N]\n    ranks: [0]\n"
    for name, text in (("mstar", SPEC_CONFIG), ("wgc", wgc_format)):
        (tmp_path / "spec.walk").write_text(SPEC_MODEL)
        (tmp_path / f"{name}.yaml").write_text(text + SESSIONS)
        res = DRIVER.plan(str(tmp_path / "spec.walk"), str(tmp_path / f"{name}.yaml"))
        assert res.plan is not None, [(d.code, d.message) for d in res.errors]
        kv = res.plan.ranks[0].kv_cache
        assert (kv.max_sessions, kv.session_pages) == (64, 512), name
        assert '"max_sessions": 64' in res.plan.to_json()
    # without the block: off, and plan.json does not name it (older plans keep their bytes)
    (tmp_path / "off.yaml").write_text(SPEC_CONFIG)
    off = DRIVER.plan(str(tmp_path / "spec.walk"), str(tmp_path / "off.yaml"))
    assert off.plan is not None and off.plan.ranks[0].kv_cache.max_sessions == 0
    assert "max_sessions" not in off.plan.to_json()
    # a count that is not positive (WG817), a key the block does not know (WG802)
    for bad, code in (("max_sessions: 0", "WG817"), ("max_turns: 3", "WG802")):
        (tmp_path / "bad.yaml").write_text(SPEC_CONFIG + f"sessions:\n  {bad}\n")
        got = check_placement(None, str(tmp_path / "bad.yaml"))
        assert code in {d.code for d in got.diagnostics}, bad
