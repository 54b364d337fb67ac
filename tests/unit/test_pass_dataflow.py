"""Unit tests for the `dataflow` pass: the call graph, cycles, `until`, and unfed reads."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from wgc.driver import Driver
from wgc.passes import dataflow

ROOT = Path(__file__).resolve().parents[2]
_driver = Driver()

NODES = """model m

param steps = 8

node A: stateless {
  impl "m:A"
  in  x: f32[4]
  in  y: f32[4]
  out x: f32[4]
  out y: f32[4]
  out z: f32[4]
  out stop: bool[]
  out flag: bool[1]
}
"""


def walk_src(body: str, inputs: str = "") -> str:
    return f"{NODES}\nwalk w({inputs}) {{\n{body}\n}}\n\nflow main {{\n  w()\n}}\n"


def result(src: str):
    r = _driver.front_end("t.walk", src)
    assert r.model is not None
    return r


def findings(src: str) -> list:
    return dataflow.run(result(src).model)


def the_walk(src: str):
    return result(src).model.walk("w")


# ------------------------------------------------------------------------- call graph


def test_call_graph_links_calls_by_value_edges():
    w = the_walk(walk_src("  A() -> x\n  A(x) -> y\n  A(x, y) -> z\n  emit z as tensor"))
    g = dataflow.call_graph(w)
    assert set(g.nodes) == {0, 1, 2}
    assert set(g.edges) == {(0, 1), (0, 2), (1, 2)}
    assert g.edges[0, 2]["channels"] == ["x"]
    assert dataflow.topological_calls(w) == [0, 1, 2]


def test_call_graph_leaves_out_loop_carried_edges():
    src = walk_src(
        "  A() -> x\n  loop l max steps {\n    A(x) -> x\n  } yield last x\n  emit x as tensor"
    )
    w = the_walk(src)
    g = dataflow.call_graph(w)
    assert not g.has_edge(1, 1)  # the loop-carried rebinding is not a cycle
    assert g.has_edge(0, 1)  # loop-init
    assert nx.is_directed_acyclic_graph(g)
    assert [d.code for d in findings(src)] == []


def test_topological_calls_is_none_for_a_cycle():
    w = the_walk(walk_src("  A(y) -> x\n  A(x) -> y"))
    assert dataflow.topological_calls(w) is None


# ------------------------------------------------------------------------- cycles


def test_three_call_cycle_is_reported_once_with_labels_on_the_others():
    src = walk_src("  A(y) -> x\n  A(x) -> z\n  A(x = z) -> y")
    (d,) = findings(src)
    assert d.code == "WG602"
    first_call_line = src.splitlines().index("  A(y) -> x") + 1
    assert d.span.line == first_call_line  # primary on the first call, at the read closing it
    assert len(d.labels) == 2
    assert "`A` -> `A` -> `A` -> `A`" in d.message


def test_two_cycles_in_one_component_are_reported_once():
    # 0 <-> 1 and 0 <-> 2 share call 0: one strongly connected component, one finding
    src = walk_src("  A(y, x = z) -> x\n  A(x) -> y\n  A(y = x) -> z")
    assert [d.code for d in findings(src)] == ["WG602"]


def test_self_read_outside_a_loop():
    (d,) = findings(walk_src("  A(x) -> x"))
    assert d.code == "WG602" and "binds itself" in d.message


def test_self_read_in_a_par_branch():
    src = walk_src("  par {\n    A(x) -> x\n    A() -> y\n  }\n  A(x, y) -> z\n  emit z as tensor")
    assert [d.code for d in findings(src)] == ["WG602"]


# ------------------------------------------------------------------------- until


def test_until_must_be_a_bool_scalar():
    src = walk_src(
        "  A() -> x\n  loop l max steps until flag {\n    A(x) -> x, flag\n  } yield last x\n"
        "  emit x as tensor"
    )
    (d,) = findings(src)
    assert d.code == "WG603" and "`bool[1]`" in d.message
    assert d.labels and "A.flag" in d.labels[0].message


def test_until_bound_only_before_the_loop():
    src = walk_src(
        "  A() -> x, stop\n  loop l max steps until stop {\n    A(x) -> x\n  } yield last x\n"
        "  emit x as tensor"
    )
    (d,) = findings(src)
    assert d.code == "WG604"
    assert any("outside the loop" in lb.message for lb in d.labels)


# ------------------------------------------------------------------------- reads


def test_optional_walk_input_gives_a_loop_carried_channel_its_start():
    body = "  loop l max steps {\n    A(x) -> x\n  } yield last x\n  emit x as tensor"
    assert [d.code for d in findings(walk_src(body))] == ["WG605"]
    assert findings(walk_src(body, "x?")) == []


def test_unbound_read_suggests_a_bound_channel():
    (d,) = findings(walk_src("  A() -> z\n  A(x = zz) -> y\n  emit y as tensor"))
    assert d.code == "WG601" and "did you mean `z`?" in (d.help or "")


def test_emit_after_a_loop_of_a_loop_local_channel_is_not_ours():
    # WG406 (channel disjointness) reports it; dataflow must stay silent
    src = walk_src("  loop l max steps {\n    A() -> y\n  }\n  emit y as tensor")
    assert findings(src) == []


def test_persist_of_an_unbound_channel():
    (d,) = findings(walk_src("  A() -> x\n  emit x as tensor\n  persist nothing"))
    assert d.code == "WG606" and "`persist`" in d.message


# ------------------------------------------------------------------------- whole programs


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*/*.walk")), ids=lambda p: p.name)
def test_examples_have_no_dataflow_findings(path):
    r = _driver.front_end(str(path))
    assert r.model is not None
    assert dataflow.run(r.model) == []
    for w in r.model.walks:
        order = dataflow.topological_calls(w)
        assert order is not None and sorted(order) == [c.id for c in w.calls]


def test_unknown_nodes_and_ports_never_raise():
    src = walk_src("  Nobody(q) -> r\n  A(nope = x) -> x\n  emit r as tensor")
    for d in findings(src):
        assert d.code in dataflow.CODES
