"""Lowering: placements of every example, streams, tensor parallelism, M* default ranks,
captures, memory, param overrides, and determinism across hash seeds."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.narrow import present
from wgc.diagnostics.diagnostic import Span
from wgc.driver import Driver
from wgc.lower.kv import pool_spec
from wgc.lower.lower import lower
from wgc.lower.params import needs_rebuild
from wgc.lower.plan import Plan
from wgc.lower.summary import cross_rank_summary
from wgc.placement.model import Batching, Group, KvCache, Named, ParamOverride, Placement
from wgc.placement.params import apply_overrides
from wgc_runtime.contract.kinds import CaptureScope, DestKind, Edge
from wgc_runtime.contract.spec import SPEC_VERSION, Dest, KvCacheSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "wgc_models").glob("*/*.walk"))
S = Span("p.yaml", 1, 1, 1, 2)
DRIVER = Driver()


def group(nodes, ranks, walks=None, tp=None) -> Group:
    w = None if walks is None else tuple(Named(x, S) for x in walks)
    ranks = tuple(ranks)
    return Group(tuple(Named(n, S) for n in nodes), ranks, w, tp or len(ranks), S)


def placement(name, world, groups, *, params=(), default_ranks=(), capture=(1, 2, 4)) -> Placement:
    return Placement(
        name, f"{name}.yaml", "mstar" if default_ranks else "wgc",
        tuple("cpu" for _ in range(world)), (), tuple(groups), KvCache(),
        Batching(max_batch=4, capture=tuple(capture)),
        tuple(ParamOverride(k, v, S) for k, v in params), 4, "auto", S,
        default_ranks=tuple(default_ranks),
    )  # fmt: skip


def front(path: Path, **kw):
    res = DRIVER.front_end(str(path), **kw)
    assert res.model is not None and not res.errors, [d.message for d in res.errors]
    return res.model


def cpu(model, without: tuple[str, ...] = ()) -> Placement:
    return placement("cpu", 1, [group([n.name for n in model.nodes if n.name not in without], [0])])


IDS = ("detokenizer",)  # BAGEL's token-id placements: its `decode` walk, not the text stream


def example(name: str) -> Path:
    return ROOT / "wgc_models" / name / f"{name}.walk"


# ---------------------------------------------------------------- every example
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_lowers_on_one_rank_without_transfers(path: Path) -> None:
    model = front(path)
    plan = lower(model, cpu(model))
    assert plan.transfers == ()
    assert len(plan.ranks) == 1 and plan.walks
    # the one rank reports each walk, unless the walk's emits say it is done (`lower.control`)
    assert all(
        w.ranks == (0,) and (w.report == (0,) or (w.report == () and w.done_emits > 0))
        for w in plan.walks
        if w.ranks
    )
    assert cross_rank_summary(plan) == []
    assert plan.to_json() == lower(model, cpu(model)).to_json()


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_lowers_with_each_node_on_its_own_rank(path: Path) -> None:
    model = front(path)
    groups = [group([n.name], [i]) for i, n in enumerate(model.nodes)]
    plan = lower(model, placement("spread", len(groups), groups))
    for t in plan.transfers:
        assert t.src_rank != t.dst_rank and t.per in ("request", "iteration")
        assert (t.per == "iteration") == (t.loop is not None)


def test_bagel_cpu_captures_the_whole_denoise_body() -> None:
    model = front(example("bagel"))
    plan = lower(model, cpu(model, IDS))
    caps = {(c.walk, c.scope, c.loop): c for c in plan.ranks[0].captures}
    cfg = caps[("image_gen_cfg", CaptureScope.LOOP, "denoise")]
    assert cfg.calls == (0, 1, 2, 3) and cfg.buckets == (1, 2, 4)
    assert ("3#latents", cfg.ports[-2][1]) == cfg.ports[-2]  # outputs come after inputs
    assert ("decode", "loop", "decode_loop") in caps
    # a capture holds its static ports at the largest bucket
    port_bytes = sum(t.nbytes or 0 for c in plan.ranks[0].captures for _, t in c.ports)
    assert plan.ranks[0].memory.static_buffer_bytes == 4 * port_bytes


def test_until_reaches_every_rank_of_the_loop_and_carried_emit() -> None:
    model = front(example("bagel"))
    plan = lower(model, cpu(model, IDS))
    rows = {(r.port, r.channel): r for r in plan.routes if r.walk == "decode"}
    (stop,) = rows[("stop", "stop")].dests
    assert stop == Dest(
        kind=DestKind.UNTIL, edge=Edge.UNTIL, name="decode_loop", loop="decode_loop", ranks=(0,)
    )
    (piece,) = [p for p in plan.ranks[0].pieces if p.walk == "decode"]
    # `emit token` before `-> token = new_token`: a sink unit of the loop, fed like a carried
    # port (iteration 0: the walk input; i+1: iteration i's new token, so EOS never is)
    (unit,) = piece.sinks
    assert unit.loops == ("decode_loop",) and unit.input.mode == "carried"
    assert unit.dest == Dest(kind=DestKind.CLIENT, edge=Edge.EMITTED, name="text", channel="token")
    emit = next(d for d in rows[("new_token", "token")].dests if d.call == unit.id)
    assert emit.carried and emit.edge == "loop_carried"
    (loop,) = piece.loops
    assert loop.until is not None and (loop.until.call, loop.until.port) == (0, "stop")
    token = present(plan.walk("decode")).inputs[0]
    assert [(d.call, d.edge) for d in token.dests] == [(unit.id, "loop_init"), (0, "loop_init")]


def test_split_decode_loop_sends_stop_to_every_rank() -> None:
    text = """model m
node A: stateless { impl "p:A" in x: f32[2] out x: f32[2] }
node B: stateless { impl "p:B" in x: f32[2] out stop: bool[] }
walk w(x: f32[2]) {
  loop l max 4 until stop {
    A(x) -> x
    B(x) -> stop
  } yield last x
  emit x as tensor
}
flow main { for seg in request.inputs { w(x = seg) } }
"""
    res = DRIVER.front_end("m.walk", text)
    assert res.model is not None and not res.errors
    plan = lower(res.model, placement("p", 2, [group(["A"], [0]), group(["B"], [1])]))
    stop = next(r for r in plan.routes if r.port == "stop")
    assert stop.dests[0].ranks == (0, 1)
    hops = {(t.channel, t.src_rank, t.dst_rank, t.per, t.nbytes) for t in plan.transfers}
    assert hops == {("x", 0, 1, "iteration", 8), ("stop", 1, 0, "iteration", 1)}
    assert [lp.ranks for r in plan.ranks for p in r.pieces for lp in p.loops] == [(0, 1)] * 2


# ---------------------------------------------------------------- streams
def test_qwen3_omni_streams_are_owned_by_the_consumer_rank() -> None:
    model = front(example("qwen3_omni"))
    groups = [
        group(["audio_encoder", "Thinker", "detokenizer"], [0]),
        group(["Talker", "Code2Wav"], [1]),
    ]
    plan = lower(model, placement("2gpu", 2, groups))
    streams = {s.name: s for r in plan.ranks for s in r.streams}
    assert [s.name for s in plan.ranks[0].streams] == ["text_tokens"]
    assert [s.name for s in plan.ranks[1].streams] == ["thinker_states", "thinker_ids", "codes"]
    states = streams["thinker_states"]
    assert (states.owner, states.producer_ranks, states.capacity) == (1, (0,), 4)
    assert states.done_after_flows == ("thinker",) and states.after_done
    codes = streams["codes"]
    assert codes.params == (("chunk", 25), ("left", 25)) and codes.capacity == 200
    assert codes.done_after_flows == ("talker",)
    # f32 [state_rows = 64, 2 x 64] states and i64 [64] ids, 4 items each; 200 i64 frames
    assert plan.ranks[1].memory.stream_bytes == 4 * (64 * 128 * 4 + 64 * 8) + 200 * 16 * 8
    # the Thinker streams its states to rank 1: once per prefill, every decode step
    hops = {(t.walk, t.channel, t.per) for t in plan.transfers}
    assert ("prefill_text", "thinker_states", "request") in hops
    assert ("thinker_decode", "thinker_states", "iteration") in hops
    talker = next(p for p in plan.ranks[1].pieces if p.walk == "talker_decode")
    modes = {p.port: p.mode for p in talker.calls[0].inputs}
    assert modes == {
        "thinker_states": "stream",
        "thinker_ids": "stream",
        "talker_input_embeds": "carried",
    }


# ---------------------------------------------------------------- groups
def test_tensor_parallel_group_runs_on_its_first_rank() -> None:
    model = front(example("bagel"))
    names = [n.name for n in model.nodes if n.name != "LLM"]
    plan = lower(model, placement("tp", 3, [group(["LLM"], [1, 2]), group(names, [0])]))
    llm = [n for n in plan.ranks[1].nodes if n.name == "LLM"]
    assert llm == [n for n in plan.ranks[2].nodes if n.name == "LLM"]
    assert llm[0].ranks == (1, 2) and llm[0].tp == 2
    assert plan.ranks[2].pieces == ()  # the leader (rank 1) drives the shards
    assert all(c.rank == 1 for p in plan.ranks[1].pieces for c in p.calls)
    # (K, V) x 2 layers x 2 kv heads of 16, f32
    full = KvCache().pages * KvCache().page_size * 2 * 2 * 2 * 16 * 4
    assert plan.ranks[1].memory.kv_bytes == plan.ranks[2].memory.kv_bytes == full // 2


def test_per_walk_groups_split_prefill_and_decode() -> None:
    model = front(example("bagel"))
    rest = [n.name for n in model.nodes if n.name not in ("LLM", *IDS)]
    groups = [
        group(["LLM"], [0], ["prefill_text", "prefill_vit", "prefill_vae", "image_gen_cfg"]),
        group(["LLM"], [1], ["decode"]),
        group(rest, [0]),
    ]
    plan = lower(model, placement("pd", 2, groups))
    assert [p.walk for p in plan.ranks[1].pieces] == ["decode"]
    assert plan.ranks[1].nodes[0].walks == ("decode",)
    assert present(plan.walk("prefill_text")).persists == (("new_token", 0), ("context", 0))


def test_mstar_default_ranks_run_unnamed_nodes() -> None:
    model = front(example("bagel"))
    groups = [group(["LLM_cfg_text"], [1], ["image_gen_cfg"]), group(["LLM_cfg_img"], [2])]
    plan = lower(model, placement("mstar", 3, groups, default_ranks=(0,)))
    assert present(plan.walk("image_gen_cfg")).ranks == (0, 1, 2)
    assert "LLM" in [n.name for n in plan.ranks[0].nodes]
    assert plan.placed == ("LLM_cfg_text", "LLM_cfg_img")  # defaults do not count as placed


def test_kv_pools_read_layers_heads_and_head_dim_from_config() -> None:
    model = front(example("bagel"))
    llm = model.node("LLM")
    assert llm is not None
    node = dataclasses.replace(
        llm, config=(("layers", 28), ("kv_heads", 4), ("head_dim", 128), ("kv_tokens", 100))
    )
    kv = KvCacheSpec(page_size=16, pages=10, dtype="bf16")
    pool = pool_spec(model, node, kv, tp=1, shared=False)
    assert (pool.layers, pool.kv_heads, pool.head_dim) == (28, 4, 128)
    assert pool.nbytes == 10 * 16 * 2 * 28 * 4 * 128 * 2
    # three labels, 100 tokens each, rounded up to pages of 16: 112 per label
    assert pool.tokens_per_request == 3 * 112 and pool.pages_per_request == 21
    half = pool_spec(model, node, kv, tp=2, shared=False)  # a tensor-parallel shard
    assert half.kv_heads == 2 and half.nbytes == pool.nbytes // 2


# ---------------------------------------------------------------- params
def test_param_overrides_rebuild_the_model() -> None:
    path = example("bagel")
    p = placement("cpu", 1, [], params=[("steps", 11), ("latent_side", 8)])
    base = front(path)
    values, diags = apply_overrides(base.params, p, {"steps": "21"})
    assert not diags and values["steps"] == 21 and values["latent_side"] == 8
    assert values["latent_tokens"] == 64  # derived params follow
    assert needs_rebuild(base, values) and not needs_rebuild(base, {"steps": 50})
    res = DRIVER.front_end(str(path), overrides=values)
    assert res.model is not None and not res.errors
    model = res.model
    plan = lower(model, dataclasses.replace(cpu(model), params=p.params), values)
    params = dict(plan.params)
    assert params["steps"] == 21 and params["latent_tokens"] == 64  # derived params follow
    loops = [lp for p_ in plan.ranks[0].pieces if p_.walk == "image_gen_cfg" for lp in p_.loops]
    assert loops[0].max == 20
    cap = next(c for c in plan.ranks[0].captures if c.walk == "image_gen_cfg")
    assert dict(cap.ports)["3#latents"].dims == (64, 16)


# ---------------------------------------------------------------- determinism
_DUMP = """
import sys
from wgc.driver import Driver
from wgc.lower.lower import lower
sys.path.insert(0, {here!r})
from test_lower import example, front, group, placement
model = front(example("qwen3_omni"))
groups = [group(["audio_encoder", "Thinker", "detokenizer"], [0]),
          group(["Talker"], [1]), group(["Code2Wav"], [2])]
sys.stdout.write(lower(model, placement("3", 3, groups)).to_json())
"""


@pytest.mark.slow
def test_plan_json_is_identical_across_hash_seeds() -> None:
    code = _DUMP.format(here=str(Path(__file__).parent))
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, cwd=ROOT, check=True)  # fmt: skip
        outs.append(run.stdout)
    assert outs[0] == outs[1] and outs[0].startswith("{")


def test_plan_is_plain_data() -> None:
    model = front(example("bagel"))
    plan = lower(model, cpu(model))
    assert isinstance(plan, Plan)
    data = json.loads(plan.to_json())
    assert data["model"] == "bagel" and data["placement"] == "cpu"
    assert data["batching"] == {"max_batch": 4, "capture": [1, 2, 4], "backend": "auto"}
    assert data["version"] == SPEC_VERSION and data["attention"] == {"backend": "auto"}
    flow = data["flows"][0]
    assert flow["node"] == "FlowPlan" and flow["body"][0]["node"] == "ForPlan"
