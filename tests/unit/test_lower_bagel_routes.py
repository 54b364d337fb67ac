"""Hand-written expectations for BAGEL on the 3xh100 split (issue 3): LLM, the encoders,
`combine_cfg` and `vae_decoder` on rank 0, `LLM_cfg_text` on rank 1 and `LLM_cfg_img` on rank 2,
the last two only for `image_gen_cfg` and `image_edit_cfg` (the edit on the input's grid). The
plan comes from wgc_models/bagel/placements/3xh100.yaml; a placement built by hand from the split
above must lower the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.diagnostics.diagnostic import Span
from wgc.driver import Driver
from wgc.lower.lower import lower
from wgc.lower.plan import Plan, Route
from wgc.lower.summary import cross_rank_summary
from wgc.placement.model import Batching, Group, KvCache, Named, Placement
from wgc_runtime.contract.kinds import SourceKind
from wgc_runtime.contract.spec import Dest, Source

ROOT = Path(__file__).resolve().parents[2]
BAGEL = ROOT / "wgc_models" / "bagel" / "bagel.walk"
YAML = ROOT / "wgc_models" / "bagel" / "placements" / "3xh100.yaml"
S = Span("3xh100.yaml", 1, 1, 1, 2)
LATENT_BYTES = 16 * 16 * 4  # f32[latent_tokens = 16, latent_dim = 16]
WALK = "image_gen_cfg"
EDIT = "image_edit_cfg"  # the same split for an edit (its latents on the input image's grid)
LLM, CFG_TEXT, CFG_IMG, COMBINE, DECODER = 0, 1, 2, 3, 4  # call ids in image_gen_cfg


def _group(nodes, ranks, walks=None) -> Group:
    w = None if walks is None else tuple(Named(x, S) for x in walks)
    return Group(tuple(Named(n, S) for n in nodes), tuple(ranks), w, len(ranks), S)


def hand_placement() -> Placement:
    groups = (
        _group(["vit_encoder", "vae_encoder", "vae_decoder", "LLM", "combine_cfg"], [0]),
        _group(["LLM_cfg_text"], [1], [WALK, EDIT]),
        _group(["LLM_cfg_img"], [2], [WALK, EDIT]),
    )
    return Placement(
        "3xh100", str(YAML), "wgc", ("cuda:0", "cuda:1", "cuda:2"), (), groups,
        KvCache(page_size=16, pages=2048, dtype="bf16"), Batching(), (), 16, "auto", S,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model():
    res = Driver().front_end(str(BAGEL))
    assert res.model is not None and not res.errors
    return res.model


def load_placement(path: Path) -> Placement:
    from wgc.placement.load import load

    placement, diags = load(str(path))
    assert placement is not None and not [d for d in diags if d.is_error]
    return placement


@pytest.fixture(scope="module")
def plan(model) -> Plan:
    return lower(model, load_placement(YAML))


def _route(plan: Plan, call: int, port: str) -> Route:
    return next(r for r in plan.routes if r.walk == WALK and r.call == call and r.port == port)


def _call_dest(route: Route, call: int, port: str) -> Dest:
    return next(d for d in route.dests if d.kind == "call" and d.call == call and d.port == port)


def test_combine_cfg_latents_reach_all_three_llms_each_iteration(plan) -> None:
    r = _route(plan, COMBINE, "latents")
    assert (r.rank, r.node, r.channel) == (0, "combine_cfg", "latents")
    for call, rank in ((LLM, 0), (CFG_TEXT, 1), (CFG_IMG, 2)):
        d = _call_dest(r, call, "latents")
        assert (d.rank, d.edge, d.loop, d.carried) == (rank, "loop_carried", "denoise", True)
    # combine_cfg reads its own previous latents too, locally
    assert _call_dest(r, COMBINE, "latents").rank == 0


def test_terminal_latents_reach_vae_decoder_once(plan) -> None:
    d = _call_dest(_route(plan, COMBINE, "latents"), DECODER, "latents")
    assert (d.rank, d.edge) == (0, "terminal")
    hops = [t for t in plan.transfers if t.walk == WALK and t.edge == "terminal"]
    assert hops == []  # same rank: an in-process hand-off


def test_cfg_velocities_reach_combine_cfg_on_rank_0(plan) -> None:
    for call, rank, port in ((CFG_TEXT, 1, "v_text"), (CFG_IMG, 2, "v_img"), (LLM, 0, "v_main")):
        r = _route(plan, call, "velocity")
        assert r.rank == rank
        d = _call_dest(r, COMBINE, port)
        assert (d.rank, d.edge, d.loop) == (0, "internal", "denoise")


def test_each_rank_has_its_own_copy_of_the_denoise_loop(plan) -> None:
    for rank, calls in ((0, (LLM, COMBINE)), (1, (CFG_TEXT,)), (2, (CFG_IMG,))):
        piece = next(p for p in plan.ranks[rank].pieces if p.walk == WALK)
        (loop,) = piece.loops
        assert (loop.name, loop.ranks, loop.calls, loop.max) == ("denoise", (0, 1, 2), calls, 49)
        assert loop.yield_last == ("latents",)
    rank1 = next(p for p in plan.ranks[1].pieces if p.walk == WALK)
    (call,) = rank1.calls
    latents = next(p for p in call.inputs if p.port == "latents")
    assert latents.mode == "carried"
    assert latents.src == Source(kind=SourceKind.CALL, rank=0, call=COMBINE, port="latents")
    assert latents.init == Source(kind=SourceKind.INPUT, name="latents")
    assert latents.optional  # `latents?`: may arrive as a bare signal
    assert rank1.inputs == ("context", "latents", "time_index")


def test_walk_plan_reports_every_rank(plan) -> None:
    w = plan.walk(WALK)
    assert w is not None and w.ranks == (0, 1, 2) and w.report == (0, 1, 2)
    assert [(i.name, i.ranks, i.optional) for i in w.inputs] == [
        ("context", (0, 1, 2), False),  # the labels' layout, persisted by the prefills
        ("latents", (0, 1, 2), True),
        ("time_index", (0, 1, 2), True),
    ]
    # the CFG nodes are placed, so the flow's `image_gen` branch is dead: not lowered
    assert plan.walk("image_gen") is None
    assert plan.placed == (
        "vit_encoder", "vae_encoder", "LLM", "LLM_cfg_text", "LLM_cfg_img", "combine_cfg",
        "vae_decoder",
    )  # fmt: skip


def test_transfers_per_iteration_list_the_velocity_bytes(plan) -> None:
    per_it = {
        (t.channel, t.src_rank, t.dst_rank, t.edge, t.nbytes)
        for t in plan.transfers
        if t.walk == WALK and t.per == "iteration"
    }
    assert per_it == {
        ("v_text", 1, 0, "internal", LATENT_BYTES),
        ("v_img", 2, 0, "internal", LATENT_BYTES),
        ("latents", 0, 1, "loop_carried", LATENT_BYTES),
        ("latents", 0, 2, "loop_carried", LATENT_BYTES),
        ("time_index", 0, 1, "loop_carried", 8),
        ("time_index", 0, 2, "loop_carried", 8),
    }
    assert all(t.loop == "denoise" for t in plan.transfers if t.per == "iteration")
    # only the CFG-parallel walks are split: every other walk stays on rank 0
    assert {t.walk for t in plan.transfers} == {WALK, EDIT}
    edit = {
        (t.channel, t.src_rank, t.dst_rank, t.nbytes)
        for t in plan.transfers
        if t.walk == EDIT and t.per == "iteration"
    }  # the same channels; the grid's bytes are known per request only
    assert edit == {
        ("e_text", 1, 0, None),
        ("e_img", 2, 0, None),
        ("edit_latents", 0, 1, None),
        ("edit_latents", 0, 2, None),
        ("time_index", 0, 1, 8),
        ("time_index", 0, 2, 8),
    }


# a KV label copied to each CFG rank before the loop: LLM's `config kv_tokens = 640` per label,
# 2 layers x (K, V) x 2 kv heads x 16 dims x bf16 per token
LABEL_BYTES = 640 * 2 * 2 * 2 * 16 * 2
CONTEXT_BYTES = 6 * 8  # the persisted `context: i64[6]` each CFG copy reads its label with


def test_cross_rank_summary(plan) -> None:
    rows = {r.walk: r for r in cross_rank_summary(plan)}
    assert set(rows) == {WALK, EDIT}
    row = rows[WALK]
    assert row.request_bytes == 2 * LABEL_BYTES + 2 * CONTEXT_BYTES
    copies = sorted((t.channel, t.src_rank, t.dst_rank, t.edge) for t in row.per_request)
    assert copies == [
        ("context", 0, 1, "persisted"),
        ("context", 0, 2, "persisted"),
        ("kv:cfg_img", 0, 2, "kv_copy"),
        ("kv:cfg_text", 0, 1, "kv_copy"),
    ]
    (loop,) = row.per_iteration
    assert loop.loop == "denoise" and loop.nbytes == 4 * LATENT_BYTES + 2 * 8


def test_rank_tables(plan) -> None:
    names = [[n.name for n in r.nodes] for r in plan.ranks]
    assert names == [
        ["vit_encoder", "vae_encoder", "LLM", "combine_cfg", "vae_decoder"],
        ["LLM_cfg_text"],
        ["LLM_cfg_img"],
    ]
    assert plan.ranks[1].nodes[0].walks == (WALK, EDIT)
    assert [p.walk for p in plan.ranks[1].pieces] == [WALK, EDIT]
    # every rank holds one KV pool (LLM's on rank 0; on 1 and 2 each CFG copy's own, for its
    # label): 2048 pages x 16 tokens x (K, V) x 2 layers x 2 kv heads x 16 dims x bf16
    pool = 2048 * 16 * 2 * 2 * 2 * 16 * 2
    assert [r.memory.kv_bytes for r in plan.ranks] == [pool] * 3
    copy = plan.ranks[1].nodes[0].kv
    assert copy is not None and copy.owner == "LLM" and copy.labels == ("cfg_text",)
    assert not copy.shared and plan.walk(WALK).kv_copies[0].node == "LLM_cfg_text"


def test_hand_built_placement_lowers_like_the_yaml(model, plan) -> None:
    hand = lower(model, hand_placement())
    assert hand.routes == plan.routes
    assert hand.transfers == plan.transfers
    assert [r.pieces for r in hand.ranks] == [r.pieces for r in plan.ranks]


def test_one_rank_cpu_placement_has_no_cross_rank_transfers(model) -> None:
    cpu = lower(model, load_placement(YAML.parent / "cpu.yaml"))
    assert len(cpu.ranks) == 1 and cpu.transfers == ()
    r = next(r for r in cpu.routes if r.walk == WALK and r.call == COMBINE and r.port == "latents")
    assert {d.rank for d in r.dests if d.kind == "call"} == {0}
    assert cross_rank_summary(cpu) == []
