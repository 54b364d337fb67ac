"""The `names` pass: what it reports, what it leaves to other passes, and that it never raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.ir.build import build
from wgc.parse.parser import Parser
from wgc.passes import names

_parser = Parser()
_driver = Driver()
ROOT = Path(__file__).resolve().parents[2]

EMBED = """
node Embed: stateless {
  impl "demo.nodes:Embed"
  in  tokens: i64[T]
  out hidden: f32[T, 64]
}
"""


def model(text: str):
    parsed = _parser.parse(text, "t.walk")
    assert parsed.tree is not None, parsed.diagnostics
    return build(parsed.tree, "t.walk")[0]


def codes(text: str) -> list[str]:
    return sorted(d.code for d in names.run(model(text)))


def test_kinds_have_separate_namespaces():
    text = (
        EMBED
        + """
walk Embed(tokens: i64[T]) { Embed(tokens) -> hidden  emit hidden as tensor }
flow Embed { for seg in request.inputs { Embed(tokens = seg) } }
param Embed = 3
"""
    )
    assert codes(text) == []


def test_input_and_output_may_share_a_name():
    text = """
node Step: stateless {
  impl "m:Step"
  in  state: f32[4]
  out state: f32[4]
}
"""
    assert codes(text) == []


def test_like_cycle_is_reported_once_at_its_first_node():
    text = """
node B: like C { }
node A: like B { }
node C: like A { }
"""
    found = names.run(model(text))
    assert [d.code for d in found] == ["WG110"]
    assert found[0].span.line == 2
    assert "`B` -> `C` -> `A` -> `B`" in found[0].message


def test_broken_like_suppresses_follow_on_errors():
    # no WG115 (no impl) and no WG103 (unknown ports) for nodes whose base is missing
    text = """
node Draft: like Missing { }
node Draft2: like Draft { }
walk w(x: f32[4]) { Draft(x) -> y  Draft2(x) -> z  emit y as tensor  emit z as tensor }
"""
    assert codes(text) == ["WG110"]


def test_like_node_inherits_impl_and_missing_impl_is_reported_on_the_base():
    text = """
node A: stateless { in x: f32[4] }
node B: like A { }
"""
    found = names.run(model(text))
    assert [(d.code, d.span.line) for d in found] == [("WG115", 2)]


def test_label_must_be_one_of_the_base_labels():
    text = """
node LLM: kv_cache(labels = [main, cfg]) { impl "m:L" }
node Good: like LLM { label cfg }
node Bad: like LLM { label cgf }
"""
    found = names.run(model(text))
    assert [d.code for d in found] == ["WG111"]
    assert "did you mean `cfg`?" in (found[0].help or "")


def test_alias_self_cycle():
    found = names.run(model("type A = A\n"))
    assert [d.code for d in found] == ["WG104"]
    assert "itself" in found[0].message


def test_bare_dtype_alias_is_left_to_the_types_pass():
    assert codes("type A = f32\n") == []


def test_wrong_direction_is_not_also_an_unknown_port():
    text = EMBED + "walk w(tokens: i64[T]) { Embed(tokens, hidden) -> x = tokens  emit x as text }"
    assert codes(text) == ["WG113", "WG113"]


def test_unknown_port_suggests_the_closest_name():
    text = EMBED + "walk w(tokens: i64[T]) { Embed(token = tokens) -> hidden  emit hidden as text }"
    (d,) = names.run(model(text))
    assert d.code == "WG103" and d.help == "did you mean `tokens`?"


def test_options_in_loop_max_are_left_to_loop_shape():
    text = (
        EMBED
        + """
walk w(tokens: i64[T]) {
  loop l max option.nope + nope { Embed(tokens) -> hidden  emit hidden as text }
}
"""
    )
    assert codes(text) == ["WG105"]


def test_duplicate_walk_argument_is_not_also_unknown_twice():
    text = (
        EMBED
        + """
walk w(tokens: i64[T]) { Embed(tokens) -> hidden  emit hidden as text }
flow main { for seg in request.inputs { w(tokens = seg, x = seg, x = seg) } }
"""
    )
    assert codes(text) == ["WG112", "WG114"]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "tests" / "ui").rglob("*.walk")), ids=lambda p: p.name
)
def test_never_raises_and_reports_only_its_codes(path):
    result = _driver.front_end(str(path), path.read_text(encoding="utf-8"), verify=False)
    if result.model is None:
        return
    assert {d.code for d in names.run(result.model)} <= set(names.CODES)
