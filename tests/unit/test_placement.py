"""Unit tests for placement loading, reachability, assignment, rules and param overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.narrow import present
from wgc.cli.targets import family_pairs
from wgc.driver import Driver
from wgc.ir.flow import BoolOp, Const, Not, OptionCond, Placed
from wgc.ir.model import Model
from wgc.placement.check import check_placement
from wgc.placement.load import load
from wgc.placement.params import apply_overrides, parse_value
from wgc.placement.reach import assignment, reachable_walks, truth
from wgc.placement.rules import value_fits

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "wgc_models"
PLACEMENTS = sorted(EXAMPLES.glob("*/placements/*.yaml"))
# a placement's model: its family's, or the family's other model its name says (`wgc compile --all`)
MODEL_OF = {Path(p).resolve(): Path(w).resolve() for w, p in family_pairs(ROOT)}
_driver = Driver()
_models: dict[str, Model] = {}


def model(family: str, path: Path | None = None) -> Model:
    walk = EXAMPLES / family / f"{family}.walk" if path is None else path
    if str(walk) not in _models:
        result = _driver.front_end(str(walk))
        assert not result.errors
        _models[str(walk)] = present(result.model, "model")
    return _models[str(walk)]


def codes(diags) -> list[str]:
    return sorted(d.code for d in diags)


def loaded(text: str, name: str = "p.yaml"):
    placement, diags = load(name, text)
    return placement, codes(diags)


# ---------------------------------------------------------------- the examples
@pytest.mark.parametrize("path", PLACEMENTS, ids=[f"{p.parts[-3]}/{p.name}" for p in PLACEMENTS])
def test_example_placements_are_clean(path: Path):
    family = path.parts[-3]
    result = check_placement(model(family, MODEL_OF[path.resolve()]), str(path))
    assert result.placement is not None
    assert not result.diagnostics, [(d.code, d.message, str(d.span)) for d in result.diagnostics]
    assert path.read_text(encoding="utf-8").startswith("# "), "start with a comment"


def test_every_family_has_the_cpu_placements():
    for family in ("bagel", "qwen3_omni", "orpheus", "vjepa2_ac", "pi05"):
        for name in ("cpu", "cpu-2rank", "cpu-3rank"):
            p, _ = load(str(EXAMPLES / family / "placements" / f"{name}.yaml"))
            assert p is not None and set(p.devices) == {"cpu"}
            assert p.world_size == {"cpu": 1, "cpu-2rank": 2, "cpu-3rank": 3}[name]


def test_mstar_config_loads_as_is():
    path = EXAMPLES / "bagel" / "placements" / "mstar-cfg-parallel.yaml"
    p, diags = load(str(path))
    assert not diags and p is not None
    assert p.format == "mstar"
    assert p.devices == ("auto:0", "auto:1", "auto:2")
    assert p.default_ranks == (0,)
    assert p.max_concurrent_requests == 8
    assert p.ignored_keys == ("model", "max_seq_len", "kv_cache.cpu_offload_pages")
    where = {(w, n): g.ranks for (w, n), g in assignment(model("bagel"), p).items()}
    assert where[("image_gen_cfg", "LLM_cfg_text")] == (1,)
    assert where[("image_gen_cfg", "LLM_cfg_img")] == (2,)
    assert where[("image_gen_cfg", "vae_decoder")] == (0,)  # not named: M*'s rank 0
    assert where[("prefill_vae", "vae_encoder")] == (0,)


def test_3xh100_assignment():
    p = present(load(str(EXAMPLES / "bagel" / "placements" / "3xh100.yaml"))[0])
    where = {(w, n): g.ranks for (w, n), g in assignment(model("bagel"), p).items()}
    assert where == {
        **{(w, "LLM"): (0,) for w in ("prefill_text", "prefill_vit", "prefill_vae", "decode")},
        ("prefill_vit", "vit_encoder"): (0,),
        ("prefill_vae", "vae_encoder"): (0,),
        **{(w, "LLM"): (0,) for w in ("image_gen_cfg", "image_edit_cfg")},
        **{(w, "LLM_cfg_text"): (1,) for w in ("image_gen_cfg", "image_edit_cfg")},
        **{(w, "LLM_cfg_img"): (2,) for w in ("image_gen_cfg", "image_edit_cfg")},
        **{(w, "combine_cfg"): (0,) for w in ("image_gen_cfg", "image_edit_cfg")},
        **{(w, "vae_decoder"): (0,) for w in ("image_gen_cfg", "image_edit_cfg")},
    }


def test_placed_decides_which_image_walk_runs():
    bagel = model("bagel")
    pd = present(load(str(EXAMPLES / "bagel" / "placements" / "pd-split.yaml"))[0])
    cpu = present(load(str(EXAMPLES / "bagel" / "placements" / "cpu.yaml"))[0])
    assert {"image_gen", "image_edit"} <= reachable_walks(bagel, pd)
    assert not {"image_gen_cfg", "image_edit_cfg"} & reachable_walks(bagel, pd)
    assert {"image_gen_cfg", "image_edit_cfg"} <= reachable_walks(bagel, cpu)
    assert not {"image_gen", "image_edit"} & reachable_walks(bagel, cpu)


def test_truth_is_three_valued():
    p, _ = loaded("place: [{nodes: [A], ranks: [0]}]")
    assert p is not None
    span = p.span
    a, b, opt = Placed("A", span), Placed("B", span), OptionCond("x", span)
    assert truth(a, p) is True and truth(b, p) is False and truth(opt, p) is None
    assert truth(Not(b, span), p) is True
    assert truth(BoolOp("and", a, opt, span), p) is None
    assert truth(BoolOp("and", b, opt, span), p) is False
    assert truth(BoolOp("or", a, opt, span), p) is True
    assert truth(BoolOp("or", b, Const(False, span), span), p) is False


def test_extern_flow_reaches_every_walk():
    text = (EXAMPLES / "orpheus" / "orpheus.walk").read_text()
    text = text.replace("flow codec on tokens {\n  snac_chunk()\n}", 'flow codec = "m:codec"')
    result = _driver.front_end("orpheus_extern.walk", text)
    assert result.model is not None
    p, _ = load(str(EXAMPLES / "orpheus" / "placements" / "cpu.yaml"))
    assert p is not None
    assert reachable_walks(result.model, p) == {w.name for w in result.model.walks}


# ---------------------------------------------------------------- loading
def test_defaults_and_derived_devices():
    p, c = loaded("place: [{nodes: [A], ranks: [0, 1]}]")
    assert c == [] and p is not None
    assert p.devices == ("auto:0", "auto:1") and p.format == "wgc"
    assert p.groups[0].tp == 2 and p.groups[0].walks is None
    assert p.kv_cache.page_size == 16 and p.batching.capture == (1, 2, 4, 8, 16)
    assert p.attention == "auto" and p.default_ranks == ()


def test_batching_defaults_follow_what_is_given():
    p, _ = loaded("batching: {max_batch: 6}")
    assert p is not None
    assert p.batching.capture == (1, 2, 4, 6)
    p, _ = loaded("batching: {capture: [1, 3, 32]}")
    assert p is not None
    assert p.batching.max_batch == 32 and p.batching.capture == (1, 3, 32)


def test_mstar_resources():
    text = """node_groups:
  - node_names: [A]
    ranks: [0, 1]
    tp_size: 2
resources:
  kv: {max_seq_len: 4096, page_size: 32, max_num_pages: 100}
  attn: {backend: triton}
"""
    p, c = loaded(text)
    assert p is not None
    assert c == [] and p.format == "mstar"
    assert (p.kv_cache.page_size, p.kv_cache.pages, p.attention) == (32, 100, "triton")
    assert p.groups[0].tp == 2 and "resources.kv.max_seq_len" in p.ignored_keys


def test_mixed_formats_follow_the_first_key():
    _, c = loaded("node_groups: []\ndevices: [cpu]\n")
    assert c == ["WG806"]
    _, c = loaded("kv_cache: {cpu_offload_pages: 3}\nplace: []\n")
    assert c == ["WG806"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["WG803"]),
        ("- a\n- b\n", ["WG803"]),
        ("place: [{nodes: [A], ranks: [0]}\n", ["WG801"]),
        ("place:\n\t- nodes: [A]\n", ["WG801"]),
        ("devices: [cpu]\nplace: [{nodes: [A], ranks: [0], tp: 0}]", ["WG810"]),
        ("place: [{nodes: [A], ranks: [0], walks: x}]", ["WG803"]),
        ("devices: [cuda:0, auto:1, cuda, cpu]\nplace: [{nodes: [A], ranks: [0, 1, 2, 3]}]", []),
        ("devices: []", ["WG818"]),
        ("params: {a: [1]}", ["WG803"]),
        ("params: {a: 1, a: 2}", ["WG805"]),
        ("place: [{nodes: [A], ranks: [0]}]\nhosts: {0: a, -1: b}", ["WG819"]),
        ("place: [{nodes: [A], ranks: [0]}]\n!!python/object:os.system {}: 1", ["WG803"]),
    ],
)
def test_load_problems(text, expected):
    _, c = loaded(text)
    assert c == expected


def test_unreadable_file():
    p, diags = load(str(ROOT / "no" / "such.yaml"))
    assert p is None and codes(diags) == ["WG010"]


def test_yaml_spans_are_one_based():
    p, _ = loaded("devices: [cpu]\nplace:\n  - nodes: [A, B]\n    ranks: [0]\n")
    assert p is not None
    b = p.groups[0].nodes[1]
    assert (b.span.line, b.span.col, b.span.end_col) == (3, 16, 17)


# ---------------------------------------------------------------- rules
def test_disjoint_walk_restrictions_are_not_overlaps():
    text = (EXAMPLES / "orpheus" / "placements" / "cpu-3rank.yaml").read_text()
    result = check_placement(model("orpheus"), "x.yaml", text)
    assert not result.diagnostics


def test_overlapping_walk_lists_report_once_per_group_pair():
    text = """devices: [cpu, cpu]
place:
  - nodes: [LLM, snac_decoder]
    ranks: [0]
    walks: [prefill, decode, snac_chunk]
  - nodes: [LLM]
    ranks: [1]
    walks: [decode, prefill]
"""
    result = check_placement(model("orpheus"), "x.yaml", text)
    assert codes(result.diagnostics) == ["WG812"]
    assert "`prefill`, `decode`" in result.diagnostics[0].message


def test_named_mstar_node_leaves_the_default():
    text = """node_groups:
  - node_names: [LLM]
    ranks: [0]
    graph_walks: [prefill]
"""
    result = check_placement(model("orpheus"), "x.yaml", text)
    # snac_decoder is never named: rank 0; LLM is named, so `decode` needs a group for it
    assert codes(result.diagnostics) == ["WG811"]
    assert "`LLM`" in result.diagnostics[0].message


@pytest.mark.parametrize(
    ("declared", "value", "ok"),
    [
        (1, 2, True),
        (1, 2.0, False),
        (1.0, 2, True),
        (True, 1, False),
        (1, True, False),
        ("a", "b", True),
        ("a", 1, False),
        (False, True, True),
    ],
)
def test_value_fits(declared, value, ok):
    assert value_fits(declared, value) is ok


# ---------------------------------------------------------------- params
def test_overrides_cli_wins_and_dependents_follow():
    bagel = model("bagel")
    p, _ = loaded("params: {latent_side: 8, steps: 10}")
    values, diags = apply_overrides(bagel.params, p, {"steps": "20"})
    assert not diags
    assert values["steps"] == 20 and values["latent_side"] == 8
    assert values["latent_tokens"] == 64 and values["image_side"] == 128


def test_invalid_yaml_overrides_are_skipped_not_reported_twice():
    bagel = model("bagel")
    p, _ = loaded("params: {steps: 1.5, nope: 3}")
    values, diags = apply_overrides(bagel.params, p, {})
    assert not diags and values["steps"] == 50


def test_bad_cli_sets():
    bagel = model("bagel")
    _, diags = apply_overrides(bagel.params, None, {"stpes": "3", "steps": "many"})
    assert codes(diags) == ["WG815", "WG815"]
    assert any("did you mean `steps`?" in (d.help or "") for d in diags)


def test_parse_value():
    assert parse_value(1, "7") == 7 and parse_value(1.0, "7") == 7.0
    assert parse_value(True, "FALSE") is False and parse_value(True, "no") is None
    assert parse_value("x", " y ") == "y" and parse_value(1, "1.5") is None


# ---------------------------------------------------------------- numbers out of the 64-bit range
def test_overrides_out_of_range_are_wg815_and_not_applied():
    bagel = model("bagel")
    for text in ("params: {steps: 99999999999999999999}", f"params: {{steps: {'9' * 5000}}}"):
        result = check_placement(bagel, "x.yaml", text)
        (d,) = [d for d in result.diagnostics if d.code == "WG815"]
        assert "out of range" in d.message and d.span.line == 1
        values, _ = apply_overrides(bagel.params, result.placement, {})
        assert values["steps"] == 50


@pytest.mark.parametrize("text", ["99999999999999999999", "9" * 5000, "1e999"])
def test_cli_sets_out_of_range(text):
    bagel = model("bagel")
    values, diags = apply_overrides(bagel.params, None, {"steps": text})
    if text == "1e999":  # not an integer at all
        assert codes(diags) == ["WG815"] and "is an integer" in diags[0].message
        return
    assert codes(diags) == ["WG815"] and "out of range" in diags[0].message
    assert values["steps"] == 50


def test_placement_integers_out_of_range_are_wg803():
    big = "9" * 5000
    for text in (
        "devices: [cpu]\nplace: [{nodes: [A], ranks: [99999999999999999999]}]",
        f"devices: [cpu]\nplace: [{{nodes: [A], ranks: [{big}]}}]",
        f"devices: [cpu]\nplace: [{{nodes: [A], ranks: [0], tp: {big}}}]",
    ):
        _, diags = load("p.yaml", text)
        assert any(d.code == "WG803" and "64-bit" in d.message for d in diags), text


def test_parse_value_range_and_odd_digits():
    assert parse_value(1, "9" * 5000) == 2**63  # out of range: `apply_overrides` reports it
    assert parse_value(1, "-9223372036854775808") == -(2**63)
    assert parse_value(1, "\u00b2") is None  # a digit to `str.isdigit`, not to `int()`
    assert not value_fits(1.0, float("inf")) and not value_fits(1, 2**63)
