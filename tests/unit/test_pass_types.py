"""The `types` pass: edge types against consumer ports, and option / repeat typing."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.ir.build import build
from wgc.parse.parser import Parser
from wgc.passes import types

_parser = Parser()
_driver = Driver()
ROOT = Path(__file__).resolve().parents[2]


def model(text: str):
    parsed = _parser.parse(text, "t.walk")
    assert parsed.tree is not None, parsed.diagnostics
    return build(parsed.tree, "t.walk")[0]


def run(text: str):
    return types.run(model(text))


def nodes(a_out: str, b_in: str) -> str:
    return f"""
param n = 4
node A: stateless {{ impl "m:A"  in x: f32[4]  out y: {a_out} }}
node B: stateless {{ impl "m:B"  in y: {b_in}  out z: f32[4] }}
"""


@pytest.mark.parametrize(
    ("produced", "consumed", "ok"),
    [
        ("f32[n]", "f32[4]", True),  # a param dim equals an int dim of its value
        ("f32[T]", "f32[4]", True),  # symbolic dims are checked at run time
        ("f32[?]", "f32[8]", True),
        ("f32[4]", "f32[8]", False),
        ("f32[4]", "bf16[4]", False),
        ("f32[4]", "f32[4, 1]", False),
    ],
)
def test_agreement(produced, consumed, ok):
    text = nodes(produced, consumed) + "walk w(x: f32[4]) { A(x) -> y  B(y) -> z  emit z as text }"
    assert (run(text) == []) is ok


def test_the_mismatch_note_names_the_differing_dim():
    text = nodes("f32[n]", "f32[8]") + "walk w(x: f32[4]) { A(x) -> y  B(y) -> z  emit z as text }"
    (d,) = run(text)
    assert d.notes == ("dim 0 differs: `n` (= 4) vs `8`",)


def test_loop_carried_read_is_reported_once():
    text = (
        nodes("f32[8]", "f32[4]").replace("in x: f32[4]", "in x: f32[8]")
        + """
walk w(y: f32[8]) {
  loop l max 3 { B(y) -> z  A(x = y) -> y }
  emit z as text
}
"""
    )
    found = run(text)
    # `B.y` reads `y`: from the walk input (iteration 0) and from `A.y` (later): one report
    # per distinct value type
    assert [d.code for d in found] == ["WG201"]


def test_untyped_walk_input_must_feed_agreeing_ports():
    text = nodes("f32[4]", "i64[4]") + "walk w(v) { A(x = v) -> y  B(y = v) -> z  emit z as text }"
    found = run(text)
    assert [d.code for d in found] == ["WG201"]
    assert found[0].message == "walk input `v` feeds ports of different types"


def test_streamed_edges_are_left_to_chunk_policy():
    text = (
        nodes("f32[1, 4]", "f32[7, 4]")
        + """
stream s: A.y -> B.y
  chunk fixed(4)
walk w(x: f32[4]) { A(x) }
walk v() { B() -> z  emit z as text }
"""
    )
    assert run(text) == []


def test_option_condition_and_repeat_types():
    text = """
option k: int = 2
option b: bool = true
option s: str = "x"
flow main {
  if option.b or option.k { fail "x" }
  repeat option.k * 2 { fail "y" }
  repeat option.s { fail "z" }
  repeat 2.5 { fail "w" }
  repeat 0 - 1 { fail "v" }
}
"""
    assert sorted(d.code for d in run(text)) == ["WG203", "WG203", "WG204", "WG204"]


def test_bare_dtype_alias():
    (d,) = run("type A = f32\n")
    assert d.code == "WG202"


@pytest.mark.parametrize(
    "path", sorted((ROOT / "tests" / "ui").rglob("*.walk")), ids=lambda p: p.name
)
def test_never_raises_and_reports_only_its_codes(path):
    result = _driver.front_end(str(path), path.read_text(encoding="utf-8"), verify=False)
    if result.model is None:
        return
    assert {d.code for d in types.run(result.model)} <= set(types.CODES)


# ---------------------------------------------------------------- numbers out of the 64-bit range
def _front_end_errors(text: str) -> list[tuple[str, int, str]]:
    result = _driver.front_end("t.walk", text)
    return [(d.code, d.span.line, d.message) for d in result.diagnostics if d.is_error]


@pytest.mark.parametrize(
    ("decl", "message"),
    [
        ("param p = 1e309", "number literal is too large for a 64-bit float"),
        ("param p = " + "9" * 5000, "number literal is too large for a 64-bit integer"),
        (
            "param p = 4611686018427387904 * 2",
            "`4611686018427387904 * 2` overflows a 64-bit integer",
        ),
        ("param p = 1e308 + 1e308", "`1e+308 + 1e+308` overflows a 64-bit float"),
        ("param p = 1e300 / 1e-300", "`1e+300 / 1e-300` overflows a 64-bit float"),
        ("type T = f32[99999999999999999999]", "number literal is too large for a 64-bit integer"),
        ("option o: float = 1e309", "number literal is too large for a 64-bit float"),
        ("option o: int = " + "9" * 30, "number literal is too large for a 64-bit integer"),
    ],
    ids=[
        "float",
        "5000-digits",
        "int-product",
        "float-sum",
        "float-quotient",
        "dim",
        "option-float",
        "option-int",
    ],
)
def test_numbers_out_of_range_are_wg203(decl, message):
    assert _front_end_errors(f"model m\n{decl}\n") == [("WG203", 2, message)]


def test_a_broken_param_is_reported_once_not_at_every_use():
    text = """model m
param p = 1e309
type T = f32[p * 2]
node A: stateless {
  impl "m:A"
  in  x: f32[4]
  out y: f32[4]
  config k = p
}
node B: stateless {
  impl "m:B"
  in  x: f32[4]
}
stream s: A.y -> B.x chunk fixed(p)
"""
    assert [(c, line) for c, line, _ in _front_end_errors(text)] == [("WG203", 2)]


def test_a_repeat_count_out_of_range_is_reported_even_with_an_option():
    # a count with an option is not evaluated at compile time, but its literals still are checked
    text = 'option k: int = 2\nflow main {\n  repeat option.k * 1e400 { fail "x" }\n}\n'
    (d,) = run(text)
    assert (d.code, d.span.line, d.message) == (
        "WG203",
        3,
        "number literal is too large for a 64-bit float",
    )


def test_the_edges_of_the_range_are_valid():
    text = "model m\nparam a = 9223372036854775807\nparam b = -9223372036854775807 - 1\n"
    text += "param c = 1.7976931348623157e308\nparam d = 00000000000000000000000042\n"
    assert _front_end_errors(text) == []
