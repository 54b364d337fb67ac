"""`wgc show --placement`: the plan as text, json and drawings (BAGEL on 3xh100 mostly).

Byte counts are computed by hand from bagel.walk's params: `latent_side = 4`, so a `Latent`
(`f32[latent_tokens, latent_dim]` = f32[16, 16]) is 16 * 16 * 4 = 1024 B and `time_index`
(i64[]) is 8 B. Each `denoise` iteration of `image_gen_cfg` on 3xh100 moves `v_text` 1 -> 0,
`v_img` 2 -> 0, `latents` 0 -> 1 and 0 -> 2, `time_index` 0 -> 1 and 0 -> 2:
4 * 1024 + 2 * 8 = 4112 B; the loop runs at most `steps - 1` = 49 times: 201488 B per request.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.narrow import present
from wgc.cli import main
from wgc.cli.show import build_plan
from wgc.config import Env
from wgc.driver import Driver
from wgc.lower.summary import cross_rank_summary
from wgc.show.plan import render_plan
from wgc.show.plan_graph import build_plan_graph
from wgc.show.plan_text import human_bytes

ROOT = Path(__file__).resolve().parents[2]
BAGEL = "wgc_models/bagel/bagel.walk"
P3 = "wgc_models/bagel/placements/3xh100.yaml"
LATENT = 16 * 16 * 4
PER_ITER = 4 * LATENT + 2 * 8
# one request's label copied to a CFG rank: kv_tokens 640 x (k, v) x 2 layers x 2 kv heads
# x head dim 16 x bf16 (the placement's kv_cache dtype)
LABEL_COPY = 640 * 2 * 2 * 2 * 16 * 2
CONTEXT = 6 * 8  # the persisted `context: i64[6]`, to each CFG rank once per request


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _invoke(args: list[str]):
    return CliRunner().invoke(main, args, obj=Env())


def _plan(placement: str = P3, sets: dict[str, str] | None = None):
    plan = build_plan(BAGEL, placement, sets or {}, Driver(), color=False)
    assert plan is not None
    return plan


def test_human_bytes() -> None:
    assert human_bytes(8) == "8 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(PER_ITER) == "4.0 KiB"
    assert human_bytes(8 * 1024 * 1024) == "8.0 MiB"
    assert human_bytes(None) == "? B (dynamic)"


def test_text_has_a_table_per_rank() -> None:
    res = _invoke(["show", BAGEL, "--placement", P3])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith("plan bagel @ 3xh100: 3 ranks\n")
    blocks = re.split(r"\n(?=rank \d )", out)
    assert [b.split()[1] for b in blocks[1:]] == ["0", "1", "2"]
    rank0, rank1, rank2 = blocks[1], blocks[2], blocks[3].split("\ncross-rank transfers")[0]
    assert "cuda:0" in rank0 and "cuda:1" in rank1 and "cuda:2" in rank2
    assert re.search(r"LLM_cfg_text\s+kv_cache\s+cfg_text\s+1\s+1\s+image_gen_cfg", rank1)
    assert "LLM_cfg_text" not in rank0 and "LLM_cfg_text" not in rank2
    assert re.search(r"LLM\s+kv_cache\s+main, cfg_text, cfg_img", rank0)
    # the loop copies, with the ranks sharing the loop
    assert re.search(r"image_gen_cfg\.denoise\s+max 49\s+ranks 0, 1, 2", rank1)
    assert re.search(r"decode\.decode_loop\s+max 2048\s+rank 0", rank0)
    for block in (rank0, rank1, rank2):
        for line in ("KV cache", "static buffers", "streams", "total"):
            assert line in block


def test_text_transfers_per_iteration_with_hand_computed_bytes() -> None:
    out = _invoke(["show", BAGEL, "--placement", P3]).stdout
    transfers = out[out.index("cross-rank transfers") :]
    assert "  image_gen_cfg (ranks 0, 1, 2)\n" in transfers
    assert "per iteration of denoise (at most 49 per request)" in transfers
    gen = transfers[: transfers.index("  image_edit_cfg (ranks 0, 1, 2)\n")]  # then the edit's
    rows = re.findall(r"rank (\d) -> (\d)\s+(\w+)\s+(\S+(?:, \d+\])?)\s+(\d+ B|[\d.]+ KiB)", gen)
    assert sorted(rows) == sorted(
        [
            ("1", "0", "v_text", "f32[16, 16]", "1.0 KiB"),
            ("2", "0", "v_img", "f32[16, 16]", "1.0 KiB"),
            ("0", "1", "latents", "f32[16, 16]", "1.0 KiB"),
            ("0", "2", "latents", "f32[16, 16]", "1.0 KiB"),
            ("0", "1", "time_index", "i64[]", "8 B"),
            ("0", "2", "time_index", "i64[]", "8 B"),
            ("0", "1", "context", "i64[6]", "48 B"),
            ("0", "2", "context", "i64[6]", "48 B"),
        ]
    )
    assert "= 4.0 KiB per iteration" in transfers
    copies = re.findall(r"rank 0 -> (\d)\s+kv:(\w+)\s+kv pages\s+([\d.]+ KiB)\s+\(kv_copy\)", gen)
    assert sorted(copies) == [("1", "cfg_text", "160.0 KiB"), ("2", "cfg_img", "160.0 KiB")]
    assert human_bytes(LABEL_COPY) == "160.0 KiB"
    total = 49 * PER_ITER + 2 * LABEL_COPY + 2 * CONTEXT
    assert f"total per request at max iterations: {human_bytes(total)}" in transfers
    assert human_bytes(total) == "516.9 KiB"
    assert "no cross-rank transfers: prefill_text, prefill_vit, prefill_vae, decode" in out


def test_summary_bytes_match_hand_count() -> None:
    gen, edit = cross_rank_summary(_plan())
    assert (gen.walk, edit.walk) == ("image_gen_cfg", "image_edit_cfg")
    walk = gen
    assert {(t.channel, t.dst_rank, t.nbytes) for t in walk.per_request} == {
        ("kv:cfg_text", 1, LABEL_COPY),
        ("kv:cfg_img", 2, LABEL_COPY),
        ("context", 1, CONTEXT),
        ("context", 2, CONTEXT),
    }
    assert walk.request_bytes == 2 * LABEL_COPY + 2 * CONTEXT
    [loop] = walk.per_iteration
    assert loop.loop == "denoise" and loop.nbytes == PER_ITER


def test_set_overrides_change_the_byte_counts() -> None:
    # latent_side = 8: latent_tokens = 64, a Latent is 64 * 16 * 4 B
    latent = 64 * 16 * 4
    per_iter = 4 * latent + 2 * 8
    res = _invoke(["show", BAGEL, "-p", P3, "--set", "latent_side=8"])
    assert res.exit_code == 0, res.output
    assert f"= {human_bytes(per_iter)} per iteration" in res.stdout
    total = 49 * per_iter + 2 * LABEL_COPY + 2 * CONTEXT
    assert f"at max iterations: {human_bytes(total)}" in res.stdout
    assert "latent_side = 8" in res.stdout


def test_dynamic_total_is_marked() -> None:
    from wgc.show.plan_text import total_text

    assert total_text(0, True) == "? B (dynamic)"
    assert total_text(1024, True) == "? B (dynamic; at least 1.0 KiB)"
    assert total_text(1024, False) == "1.0 KiB"


def test_json_is_the_plan() -> None:
    res = _invoke(["show", BAGEL, "-p", P3, "--format", "json"])
    assert res.exit_code == 0
    assert res.stdout == _plan().to_json()
    data = json.loads(res.stdout)
    assert len(data["ranks"]) == 3


def test_placement_errors_print_like_check_and_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [cpu]\nplace:\n  - nodes: [LLM]\n    rankz: [0]\n")
    res = _invoke(["show", BAGEL, "--placement", str(bad)])
    assert res.exit_code == 1
    assert "error[WG802]: unknown key `rankz`" in res.stderr
    assert "did you mean `ranks`?" in res.stderr
    assert "could not check" in res.stderr
    assert res.stdout == ""


def test_unknown_set_is_an_error() -> None:
    res = _invoke(["show", BAGEL, "-p", P3, "--set", "nope=1"])
    assert res.exit_code == 1
    assert "WG815" in res.stderr


def test_set_without_placement_is_a_usage_error() -> None:
    res = _invoke(["show", BAGEL, "--set", "steps=3"])
    assert res.exit_code == 1
    assert "--placement" in res.stderr


def test_drawing_model_puts_calls_in_their_ranks() -> None:
    pg = build_plan_graph(_plan())
    g = pg.graph
    by_id = {c.id: c for c in g.clusters}

    def rank_of(node_id: str) -> str:
        cid = present(g.node(node_id).cluster, "cluster")
        while (parent := by_id[cid].parent) is not None:
            cid = parent
        return cid

    calls = {n.label: rank_of(n.id) for n in g.nodes if n.kind == "call" and "cfg" in n.id}
    assert calls["LLM_cfg_text"] == "r1" and calls["LLM_cfg_img"] == "r2"
    assert calls["combine_cfg"] == "r0"
    # one copy of `denoise` per rank
    loops = [c for c in g.clusters if c.kind == "loop" and "denoise" in c.id]
    walks = ("image_gen_cfg", "image_edit_cfg")  # the edit's CFG split is the same
    assert {c.id for c in loops} == {f"l_{w}_denoise_r{r}" for w in walks for r in range(3)}
    # cross-rank hops: merged per (producer, consumer, kind), labelled with bytes per iteration
    labels = sorted(e.label for e in pg.cross)
    assert labels == [
        "e_img ? B (dynamic) /iter",  # an edit's: on the input image's grid, per request
        "e_text ? B (dynamic) /iter",
        "edit_latents ? B (dynamic), time_index 8 B /iter",
        "edit_latents ? B (dynamic), time_index 8 B /iter",
        "latents 1.0 KiB, time_index 8 B /iter",
        "latents 1.0 KiB, time_index 8 B /iter",
        "v_img 1.0 KiB /iter",
        "v_text 1.0 KiB /iter",
    ]
    assert all(e.src_rank != e.dst_rank for e in pg.cross)
    assert not any(e.src == x.src and e.dst == x.dst for e in g.edges for x in pg.cross)


def test_dot_and_mermaid_cluster_by_rank() -> None:
    dot = render_plan(_plan(), "dot")
    assert 'subgraph "cluster_r0"' in dot and 'subgraph "cluster_r2"' in dot
    assert 'label="v_text 1.0 KiB /iter"' in dot and "penwidth=2.4" in dot
    mer = render_plan(_plan(), "mermaid")
    assert mer.startswith("flowchart LR\n")
    assert mer.count("==>") == 8  # 4 hops, for text-to-image and for an edit
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_html_is_self_contained() -> None:
    res = _invoke(["show", BAGEL, "-p", P3, "--format", "html"])
    assert res.exit_code == 0
    page = res.stdout
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    for r in range(3):
        assert f'id="rank-{r}"' in page
    assert "v_text 1.0 KiB /iter" in page
    assert 'class="edge cross' in page


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["text", "json", "dot", "mermaid", "html"])
def test_deterministic_across_hash_seeds(fmt: str) -> None:
    outs = []
    for seed in ("0", "12345"):
        done = subprocess.run(
            [sys.executable, "-m", "wgc.cli", "show", BAGEL, "-p", P3, "--format", fmt],
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=ROOT,
            check=True,
        )
        outs.append(done.stdout)
    assert outs[0] == outs[1]
    assert outs[0]


def test_every_example_placement_renders() -> None:
    from wgc.cli.targets import family_pairs

    driver = Driver()
    for walk, placement in family_pairs(ROOT):
        plan = build_plan(
            os.path.relpath(walk, ROOT), os.path.relpath(placement, ROOT), {}, driver, False
        )
        assert plan is not None, (walk, placement)
        for fmt in ("text", "dot", "mermaid", "html"):
            assert render_plan(plan, fmt)


def test_a_pd_handoff_has_bytes_from_the_declared_kv_geometry(tmp_path: Path) -> None:
    # orpheus.walk: kv_tokens 1024 x (k, v) x layers 2 x kv_heads 2 x head_dim 16 x f32
    handoff = 1024 * 2 * 2 * 2 * 16 * 4
    walk = ROOT / "wgc_models/orpheus/orpheus.walk"
    placement = ROOT / "wgc_models/orpheus/placements/cpu-3rank.yaml"
    plan = build_plan(str(walk), str(placement), {}, Driver(), color=False)
    assert plan is not None
    states = [t for t in plan.transfers if t.edge == "state"]
    assert states and all(t.nbytes == handoff for t in states)
    text = render_plan(plan, "text")
    assert "node state  512.0 KiB  (state)" in text
    assert "? B (dynamic)" not in text
    # without `kv_tokens` the bound is the compiler's guess from static shapes: dynamic
    source = walk.read_text()
    line = "  config kv_tokens = kv_tokens"
    assert line in source
    (tmp_path / "orpheus.walk").write_text(source.replace(line, "  # no kv_tokens"))
    (tmp_path / "p.yaml").write_text(placement.read_text())
    plan = build_plan(str(tmp_path / "orpheus.walk"), str(tmp_path / "p.yaml"), {}, Driver(), False)
    assert plan is not None
    assert [t.nbytes for t in plan.transfers if t.edge == "state"] == [None] * len(states)
