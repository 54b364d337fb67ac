"""Node-state handoffs in the plan (wgc/lower/handoffs.py), and the other per-node / per-call /
per-stream facts the runtime reads from the plan: declared port types, bound ports, consumer
flows.

BAGEL's pd-split.yaml runs the LLM's prefill walks on rank 0 and `decode` / `image_gen` on rank 1,
so the LLM's state moves 0 -> 1 before a decode or image walk (and back before a later prefill);
the colocated plans need no move at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.narrow import present
from wgc.driver import Driver
from wgc.lower.lower import lower
from wgc.lower.plan import Plan
from wgc.placement.load import load
from wgc_runtime.contract.conductor import Handoff
from wgc_runtime.contract.spec import TypeSpec

ROOT = Path(__file__).resolve().parents[2]


def plan_of(family: str, placement: str) -> Plan:
    res = Driver().front_end(str(ROOT / "wgc_models" / family / f"{family}.walk"))
    assert res.model is not None and not res.errors
    p, diags = load(str(ROOT / "wgc_models" / family / "placements" / f"{placement}.yaml"))
    assert p is not None and not [d for d in diags if d.is_error]
    return lower(res.model, p)


@pytest.fixture(scope="module")
def pd_split() -> Plan:
    return plan_of("bagel", "pd-split")


def test_bagel_pd_split_moves_the_llm_state_between_prefill_and_decode(pd_split) -> None:
    to_decode = (Handoff(node="LLM", from_ranks=(0,), to_ranks=(1,)),)
    to_prefill = (Handoff(node="LLM", from_ranks=(1,), to_ranks=(0,)),)
    expected = {
        "prefill_text": (to_prefill, (("LLM", (0,)),)),
        "prefill_vit": (to_prefill, (("LLM", (0,)),)),
        "prefill_vae": (to_prefill, (("LLM", (0,)),)),
        "decode": (to_decode, (("LLM", (1,)),)),
        "image_gen": (to_decode, (("LLM", (1,)),)),
        "image_edit": (to_decode, (("LLM", (1,)),)),
    }
    got = {w.name: (w.handoffs, w.kv_groups) for w in pd_split.walks}
    assert got == expected


@pytest.mark.parametrize(
    ("family", "placement"),
    [("bagel", "cpu"), ("bagel", "3xh100"), ("bagel", "cpu-3rank"), ("qwen3_omni", "2gpu")],
)
def test_plans_where_each_kv_node_stays_on_one_group_have_no_handoffs(family, placement) -> None:
    plan = plan_of(family, placement)
    assert all(not w.handoffs and not w.kv_groups for w in plan.walks)


@pytest.mark.parametrize(
    ("family", "prefill", "decode"),
    [("orpheus", "prefill", "decode"), ("pi05", "prefill", "action_gen")],
)
def test_cpu_3rank_pd_splits_hand_the_llm_state_to_the_decoding_group(
    family, prefill, decode
) -> None:
    plan = plan_of(family, "cpu-3rank")
    a, b = present(plan.walk(prefill)).kv_groups[0][1], present(plan.walk(decode)).kv_groups[0][1]
    assert a != b
    assert present(plan.walk(decode)).handoffs == (Handoff(node="LLM", from_ranks=a, to_ranks=b),)
    assert present(plan.walk(prefill)).handoffs == (Handoff(node="LLM", from_ranks=b, to_ranks=a),)


def test_plan_json_carries_the_handoffs(pd_split) -> None:
    text = pd_split.to_json()
    assert '"handoffs"' in text and '"from_ranks"' in text and '"kv_groups"' in text


# ---------------------------------------------------------------- ports, writes, consumers
def test_node_plans_declare_every_port_type(pd_split) -> None:
    llm = next(n for n in pd_split.ranks[1].nodes if n.name == "LLM")
    assert [p for p, _ in llm.inputs] == [
        "text_inputs",
        "token",
        "vit_embeddings",
        "vae_latents",
        "latents",
        "edit_latents",
        "time_index",
        "context",
    ]
    assert dict(llm.outputs)["velocity"] == TypeSpec("f32", (16, 16))  # no call here uses it
    assert dict(llm.inputs)["text_inputs"] == TypeSpec("i64", ("T",))


def test_like_copies_declare_their_base_ports() -> None:
    plan = plan_of("bagel", "3xh100")
    cfg = next(n for n in plan.ranks[1].nodes if n.name == "LLM_cfg_text")
    assert [p for p, _ in cfg.outputs] == [
        "new_token",
        "stop",
        "context",
        "velocity",
        "latents",
        "edit_velocity",
        "edit_latents",
        "time_index",
    ]


def test_calls_record_the_ports_they_bind(pd_split) -> None:
    decode = next(p for p in pd_split.ranks[1].pieces if p.walk == "decode")
    assert decode.calls[0].writes == ("new_token", "stop")
    vae = next(p for p in pd_split.ranks[0].pieces if p.walk == "prefill_vae")
    llm = next(c for c in vae.calls if c.node == "LLM")
    assert llm.writes == ()  # `LLM(vae_latents)`: editing context only, binds nothing


def test_streams_list_their_consumer_flows() -> None:
    orpheus = plan_of("orpheus", "cpu-3rank")
    (tokens,) = [s for r in orpheus.ranks for s in r.streams]
    assert tokens.consumer_flows == ("codec",)
    assert tokens.done_after_flows == ("speech",)
