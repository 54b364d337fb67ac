"""Unit tests for the `dataflow` pass: the call graph, cycles, `until`, and unfed reads."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import networkx as nx
import pytest

from tests.narrow import present
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
    return dataflow.run(present(result(src).model))


def the_walk(src: str):
    return present(present(result(src).model).walk("w"))


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


@pytest.mark.parametrize(
    "path", sorted((ROOT / "wgc_models").glob("*/*.walk")), ids=lambda p: p.name
)
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


# ------------------------------------------------------------------------- WG608 kv-cache order
KV_NODES = "model m\n\n" + "".join(
    f'node {n}: {e} {{\n  impl "m:{n}"\n  in  text: i64[1]\n  out token: i64[1]\n}}\n\n'
    for n, e in (("L1", "kv_cache"), ("L2", "kv_cache"), ("S", "stateless"))
)


def kv_walk(calls: list[tuple[str, str]]) -> str:
    """A walk of calls `(node, channel read)`; call `i` binds `t<i>`."""
    body = "\n".join(f"  {n}(text = {src}) -> t{i} = token" for i, (n, src) in enumerate(calls))
    return f"{KV_NODES}walk w(a: i64[1]) {{\n{body}\n}}\n"


def _pairwise_wg608(model, w) -> list[tuple[int, int]]:
    """WG608 by its definition: for each call of a shared cache, the first earlier call of that
    cache that neither reaches it nor is reached from it (a path query per pair)."""
    g = dataflow.call_graph(w)
    by_node: dict[str, list] = {}
    for c in w.calls:
        if model.node(c.node).engine.value == "kv_cache":
            by_node.setdefault(c.node, []).append(c)
    out = []
    for calls in by_node.values():
        for i, later in enumerate(calls):
            for c in calls[:i]:
                if not nx.has_path(g, c.id, later.id) and not nx.has_path(g, later.id, c.id):
                    out.append((c.id, later.id))
                    break
    return out


def _wg608(src: str, pairwise: bool = True) -> tuple[list[tuple[int, int]], list | None]:
    """The pass's WG608 findings as (earlier call id, later call id), and the definition's."""
    r = _driver.front_end("t.walk", src, verify=False)
    assert r.model is not None
    (w,) = r.model.walks
    found = dataflow._unordered_kv_calls(r.model, w)
    assert all(d.code == "WG608" for d in found)
    by_span = {(c.name_span or c.span): c.id for c in w.calls}
    got = [(by_span[d.labels[0].span], by_span[d.span]) for d in found]
    return got, _pairwise_wg608(r.model, w) if pairwise else None


def test_wg608_matches_its_pairwise_definition_on_random_walks():
    import random

    rng = random.Random(608)
    for _ in range(60):
        channels, calls = ["a"], []
        for i in range(rng.randint(2, 12)):
            calls.append((rng.choice(["L1", "L2", "S"]), rng.choice(channels)))
            channels.append(f"t{i}")
        got, want = _wg608(kv_walk(calls))
        assert got == want, calls


@contextmanager
def _deadline(seconds: int):
    """Fail (rather than hang for minutes) when the body runs past ``seconds``."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(_signum, _frame):
        raise TimeoutError(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_wg608_on_a_chain_of_600_calls_of_one_cache():
    # pairwise path queries made this cubic (24 s at N = 600; now well under a second). The
    # deadline is generous so that a loaded machine cannot fail it: no timing comparison here.
    n = 600
    chain = [("L1", "a" if i == 0 else f"t{i - 1}") for i in range(n)]
    with _deadline(10):
        ordered = result(kv_walk(chain))  # the whole front end, as `wgc check` runs it
        forked, _ = _wg608(kv_walk([*chain, ("L1", f"t{n // 2}")]), pairwise=False)
    assert [d for d in ordered.diagnostics if d.code == "WG608"] == []
    # the extra call reads t300: it is unordered with calls 301..599, and names the first
    assert forked == [(n // 2 + 1, n)]
