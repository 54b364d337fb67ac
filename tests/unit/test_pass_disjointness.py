"""The `disjointness` pass: who writes a channel is never ambiguous."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.passes import disjointness

ROOT = Path(__file__).resolve().parents[2]
_driver = Driver()

NODES = """
type L = f32[4]
node f: stateless {
  impl "m:F"
  in  x: L
  in  y: L
  out x: L
  out y: L
  out z: L
  out stop: bool[]
}
"""


def _run(body: str, inputs: str = "x?: L, y?: L"):
    src = f"{NODES}\nwalk w({inputs}) {{\n{body}\n}}\n"
    result = _driver.front_end("t.walk", src, verify=False)
    assert result.model is not None, result.diagnostics
    return disjointness.run(result.model)


def _codes(body: str, inputs: str = "x?: L, y?: L") -> list[str]:
    return sorted(d.code for d in _run(body, inputs))


# -------------------------------------------------------------------- valid programs


@pytest.mark.parametrize("path", sorted((ROOT / "wgc_models").glob("*/*.walk")))
def test_examples_are_disjoint(path: Path):
    result = _driver.front_end(str(path), verify=False)
    assert result.model is not None
    assert disjointness.run(result.model) == []


def test_cfg_par_with_distinct_names_and_a_yield_rebinding_the_input_is_valid():
    body = """
  loop denoise max 49 {
    par {
      f(x, y) -> a = x
      f(x, y) -> b = x
      f(x, y) -> c = x
    }
    f(x = a, y = b) -> x, y
  } yield last x
"""
    assert _codes(body) == []


def test_loop_body_may_bind_a_name_that_exists_outside():
    assert _codes("f(x, y) -> z\nloop l max 3 { f(x, y = z) -> z }") == []


# -------------------------------------------------------------------- WG401


def test_two_of_three_branches_write_the_same_channel():
    diags = _run("par {\n f(x) -> v = z\n f(x) -> w = z\n f(y = x) -> v = z\n}")
    assert [d.code for d in diags] == ["WG401"]
    d = diags[0]
    assert d.span.line == d.labels[0].span.line + 2  # primary: the later write
    assert d.labels[0].message == "first written here"


def test_all_three_branches_write_it_reports_each_later_write_once():
    assert _codes("par {\n f(x) -> v = z\n f(x) -> v = z\n f(x) -> v = z\n}") == [
        "WG401",
        "WG401",
    ]


def test_nested_par_branch_conflicts_with_an_outer_sibling():
    body = "par {\n par { f(x) -> a = z\n f(x) -> b = z }\n f(x) -> a = z\n}"
    assert _codes(body) == ["WG401"]


def test_a_loop_yield_in_a_branch_conflicts_with_a_sibling_write():
    body = "par {\n loop l max 2 { f(x) -> x } yield last x\n f(y = y) -> x\n}"
    assert _codes(body) == ["WG401"]  # one finding per write: the race, not the input rebinding


# -------------------------------------------------------------------- WG402


def test_two_bindings_in_one_iteration():
    diags = _run("loop l max 3 {\n f(x) -> h = z\n f(x = h) -> h = z\n}")
    assert [d.code for d in diags] == ["WG402"]
    assert diags[0].labels[0].message == "first bound here"


def test_call_output_rebinding_a_walk_input():
    diags = _run("f(x) -> y")
    assert [d.code for d in diags] == ["WG402"]
    assert diags[0].labels[0].message == "walk input declared here"


def test_par_branch_write_counts_in_the_enclosing_scope():
    assert _codes("par {\n f(x) -> a = z\n f(y = y) -> b = z\n}\nf(x = a) -> a = z") == ["WG402"]


def test_call_after_a_yield_rebinds_it():
    assert _codes("loop l max 2 { f(x) -> x } yield last x\nf(x) -> x") == ["WG402"]


def test_two_outputs_of_one_call_are_the_names_pass_business():
    assert _codes("f(x) -> a = x, a = y") == []


def test_yields_of_two_loops_may_update_the_same_channel():
    body = "loop a max 2 { f(x) -> x } yield last x\nloop b max 2 { f(x) -> x } yield last x"
    assert _codes(body) == []


# -------------------------------------------------------------------- WG403


def test_last_and_all_of_the_same_channel():
    diags = _run("loop l max 2 { f(x) -> x } yield last x yield all x")
    assert [d.code for d in diags] == ["WG403"]
    assert "`last` and `all`" in diags[0].message


def test_listed_twice():
    assert _codes("loop l max 2 { f(x) -> x } yield last x, x") == ["WG403"]


# -------------------------------------------------------------------- WG404


def test_yield_of_a_channel_the_body_never_binds():
    diags = _run("loop l max 2 { f(x) -> x } yield last q")
    assert [d.code for d in diags] == ["WG404"]


def test_yield_typo_gets_a_did_you_mean():
    (d,) = _run("loop l max 2 { f(x) -> latents = x } yield last latent")
    assert "did you mean `latents`" in (d.help or "")


def test_unbound_until_belongs_to_the_dataflow_pass():
    assert _codes("loop l max 2 until nope { f(x) -> x }") == []


# -------------------------------------------------------------------- WG405


def test_branch_reads_a_sibling_write_with_a_label_on_that_write():
    diags = _run("par {\n f(x) -> a = z\n f(x = a) -> b = z\n}")
    assert [d.code for d in diags] == ["WG405"]
    assert diags[0].labels[0].span.line == diags[0].span.line - 1


# -------------------------------------------------------------------- WG406


def test_loop_local_read_after_the_loop():
    diags = _run("loop l max 2 { f(x) -> x, q = z }\nf(x = q) -> r = z", "x?: L")
    assert [d.code for d in diags] == ["WG406"]
    assert "yield last q" in (diags[0].help or "")


def test_forgotten_yield_of_a_carried_channel():
    diags = _run("loop l max 2 { f(x) -> x }\nf(x) -> r = z", "x?: L")
    assert [d.code for d in diags] == ["WG406"]
    assert "before the loop" in diags[0].message


def test_yielded_carried_channel_is_fine():
    assert _codes("loop l max 2 { f(x) -> x } yield last x\nf(x) -> r = z", "x?: L") == []


def test_carried_channel_nothing_reads_after_the_loop_is_fine():
    assert _codes("loop l max 2 { f(x) -> x }", "x?: L") == []
