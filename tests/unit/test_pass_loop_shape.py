"""The `loop_shape` pass: static shapes of what loops carry and call, and static loop bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.passes import loop_shape

ROOT = Path(__file__).resolve().parents[2]
_driver = Driver()

NODES = """
node step: stateless {
  impl "m:Step"
  in  x: f32[X]
  in  c: f32[?, 4]
  in  s: f32[4]
  out x: f32[X]
  out y: f32[4]
  out s: f32[4]
}
node fixed: stateless {
  impl "m:Fixed"
  in  s: f32[4]
  out s: f32[4]
}
"""


def _run(src: str):
    result = _driver.front_end("t.walk", src, verify=False)
    assert result.model is not None, result.diagnostics
    return loop_shape.run(result.model)


def _codes(src: str) -> list[str]:
    return sorted(d.code for d in _run(src))


# -------------------------------------------------------------------- valid programs


BAGEL_CFG = """
model bagel_cfg
param steps = 50
param latent_tokens = 16
type Latent = f32[latent_tokens, 16]
node LLM: kv_cache(labels = [main, cfg_text, cfg_img]) {
  impl "m:LLM"
  in  text_inputs: i64[T]
  in  latents:     Latent
  in  time_index:  i64[]
  out velocity:    Latent
}
node LLM_cfg_text: like LLM { label cfg_text }
node LLM_cfg_img: like LLM { label cfg_img }
node combine_cfg: stateless {
  impl "m:CombineCfg"
  in  v_main: Latent
  in  v_text: Latent
  in  v_img: Latent
  in  latents: Latent
  in  time_index: i64[]
  out latents: Latent
  out time_index: i64[]
}
node vae_decoder: stateless {
  impl "m:VaeDecoder"
  in  latents: Latent
  out image: u8[64, 64, 3]
}
walk image_gen_cfg(latents?: Latent, time_index?: i64[]) {
  loop denoise max steps - 1 {
    par {
      LLM(latents, time_index)          -> v_main = velocity
      LLM_cfg_text(latents, time_index) -> v_text = velocity
      LLM_cfg_img(latents, time_index)  -> v_img = velocity
    }
    combine_cfg(v_main, v_text, v_img, latents, time_index) -> latents, time_index
  } yield last latents
  vae_decoder(latents) -> image
  emit image as image
}
flow main { image_gen_cfg() }
"""


def test_bagel_cfg_loop_is_valid_through_the_whole_pipeline():
    # LLM's `text_inputs: i64[T]` is dynamic but unused in the loop: only used ports count.
    result = _driver.front_end("bagel_cfg.walk", BAGEL_CFG)
    assert result.diagnostics == []


@pytest.mark.parametrize("path", sorted((ROOT / "wgc_models").glob("*/*.walk")))
def test_examples_have_static_loops(path: Path):
    result = _driver.front_end(str(path), verify=False)
    assert result.model is not None
    found = loop_shape.run(result.model)
    assert [d for d in found if d.code != "WG304"] == []
    # the only loops that opt out of capture: BAGEL's edits, on the input image's latent grid
    eager = {"image_edit", "image_edit_cfg"} if path.stem == "bagel" else set()
    assert {w.name for w in result.model.walks if any(lp.eager for lp in w.loops)} == eager
    assert len(found) == len(eager)


def test_dynamic_shapes_outside_loops_are_fine():
    assert (
        _codes(NODES + "walk w(x?: f32[X], c?: f32[?, 4]) { step(x, c) -> y emit y as tensor }")
        == []
    )


# -------------------------------------------------------------------- WG301


def test_carried_symbolic_channel_is_one_wg301_not_also_wg302():
    diags = _run(NODES + "walk w(x?: f32[X]) { loop l max 4 { step(x) -> x } yield last x }")
    assert [d.code for d in diags] == ["WG301"]
    d = diags[0]
    assert "`x`" in d.message and "f32[X]" in d.message
    assert d.span.line == d.span.end_line and d.help and "eager" in d.help


def test_untyped_walk_input_takes_the_reading_port_type():
    # `c` carried with a static producer type but a `?` port: the input's type is the port's.
    src = (
        NODES
        + """
node mk: stateless {
  impl "m:Mk"
  in  c: f32[?, 4]
  out c: f32[8, 4]
}
walk w(c?) { loop l max 4 { mk(c) -> c } yield last c }
"""
    )
    diags = _run(src)
    assert [d.code for d in diags] == ["WG301"]
    assert "f32[?, 4]" in diags[0].message


def test_static_carried_channel_with_static_init_is_fine():
    assert (
        _codes(NODES + "walk w(s?: f32[4]) { loop l max 4 { fixed(s) -> s } yield last s }") == []
    )


# -------------------------------------------------------------------- WG302


def test_each_dynamic_port_of_each_call_is_reported_once():
    src = (
        NODES
        + """
walk w(s?: f32[4], c?: f32[?, 4], x?: f32[X]) {
  loop l max 4 {
    step(s, c, x = x0) -> s, y
    step(s = s, c = c) -> y2 = y
  } yield last s
}
"""
    )
    diags = [d for d in _run(src)]
    wg302 = [d for d in diags if d.code == "WG302"]
    # `c` in both calls, `x` (reads `x0`, unbound: still a dynamic port) in the first
    assert len(wg302) == 3
    assert {d.labels[0].span.line for d in wg302} == {4, 5}  # the declarations `in x`, `in c`


def test_stream_ports_of_a_node_called_in_a_loop_count():
    src = """
node talker: stateless {
  impl "m:Talker"
  in  s: f32[4]
  out s: f32[4]
  out codes: i64[?]
}
node code2wav: stateless {
  impl "m:Code2Wav"
  in  codes: i64[?]
  out audio: f32[100]
}
stream codes: talker.codes -> code2wav.codes
walk w(s?: f32[4]) { loop l max 4 { talker(s) -> s } yield last s }
walk v() { code2wav() -> audio emit audio as audio }
"""
    diags = _run(src)
    assert [(d.code, "`codes`" in d.message) for d in diags] == [("WG302", True)]


def test_unknown_nodes_and_ports_are_left_to_the_names_pass():
    src = NODES + "walk w(s?: f32[4]) { loop l max 4 { nope(s) -> s step(s, zz = s) -> q = s } }"
    assert _codes(src) == []


# -------------------------------------------------------------------- WG304 and nesting


def test_eager_loop_gets_one_warning_listing_every_dynamic_shape():
    src = (
        NODES
        + """
walk w(x?: f32[X], c?: f32[?, 4]) {
  loop l max 4 eager { step(x, c) -> x, y } yield last x yield all y
}
"""
    )
    diags = _run(src)
    assert [d.code for d in diags] == ["WG304"]
    assert len(diags[0].notes) == 2  # carried `x`, port `c`


def test_outer_eager_loop_covers_nested_loops():
    src = (
        NODES
        + """
walk w(x?: f32[X], c?: f32[?, 4]) {
  loop outer max 2 eager {
    loop inner max 3 { step(x, c) -> x } yield last x
  } yield last x
}
"""
    )
    diags = _run(src)
    assert [d.code for d in diags] == ["WG304"]
    assert "`outer`" in diags[0].message


def test_inner_eager_loop_does_not_cover_the_outer_loop():
    src = (
        NODES
        + """
walk w(x?: f32[X], c?: f32[?, 4], s?: f32[4]) {
  loop outer max 2 {
    step(s, c) -> s
    loop inner max 3 eager { step(x, c = c) -> x } yield last x
  } yield last s
}
"""
    )
    assert _codes(src) == ["WG302", "WG304"]


# -------------------------------------------------------------------- WG303


@pytest.mark.parametrize(
    ("bound", "words"),
    [
        ("option.n", "option.n"),
        ("steps - 8", "`0`"),
        ("steps - 10", "`-2`"),
        ("2.5", "not an integer"),
        ("steps / 3", "exact"),
        ("steps / (steps - 8)", "division by zero"),
        ("flag", "must be an integer"),
    ],
)
def test_bad_bounds(bound: str, words: str):
    src = f"""
param steps = 8
param flag = true
option n: int = 3
{NODES}
walk w(s?: f32[4]) {{ loop l max {bound} {{ fixed(s) -> s }} yield last s }}
"""
    diags = _run(src)
    assert [d.code for d in diags] == ["WG303"]
    assert words in diags[0].message
    assert diags[0].help


def test_option_bound_suggests_a_param_and_until():
    src = "option n: int = 3\n" + NODES
    src += "walk w(s?: f32[4]) { loop l max option.n { fixed(s) -> s } yield last s }"
    (d,) = _run(src)
    assert d.help is not None and "param" in d.help and "until" in d.help


def test_unknown_names_and_broken_params_in_bounds_are_reported_elsewhere():
    src = "param broken = 1 / 0\n" + NODES
    src += "walk w(s?: f32[4]) { loop a max nope { fixed(s) -> s } "
    src += "loop b max broken { fixed(s) -> s } }"
    assert _codes(src) == []


# -------------------------------------------------------------------- bounds out of range
@pytest.mark.parametrize(
    ("bound", "message"),
    [
        ("1e309", "number literal is too large for a 64-bit float"),
        ("-1e309", "number literal is too large for a 64-bit float"),
        ("1e200 * 1e200", "`1e+200 * 1e+200` overflows a 64-bit float"),
        ("99999999999999999999", "number literal is too large for a 64-bit integer"),
        ("9" * 5000, "number literal is too large for a 64-bit integer"),
        ("9223372036854775807 + 1", "`9223372036854775807 + 1` overflows a 64-bit integer"),
    ],
    ids=["inf", "neg-inf", "product", "int", "5000-digits", "int-sum"],
)
def test_a_bound_out_of_range_is_wg303_not_a_crash(bound, message):
    # `1e309` used to raise OverflowError (`int(inf)`) while the pass built its help text
    walk = f"walk w(s?: f32[4]) {{ loop l max {bound} {{ fixed(s) -> s }} yield last s }}"
    (d,) = _run(NODES + walk)
    assert d.code == "WG303"
    assert d.message == f"loop bound is not a static integer: {message}"
    # the span is the number, or the operation, that is out of range
    at = walk.index(bound.removeprefix("-")) + 1
    assert (d.span.line, d.span.col) == (NODES.count("\n") + 1, at)


def test_the_largest_bound_in_range_is_accepted():
    src = (
        NODES
        + "walk w(s?: f32[4]) { loop l max 9223372036854775807 { fixed(s) -> s } yield last s }"
    )
    assert _codes(src) == []
