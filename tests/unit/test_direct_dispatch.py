"""Generated dispatch: plain pieces get straight code in their rank module
(`wgc.codegen.direct`), the executor runs it on their one value
(`wgc_runtime.core.executor.direct`), and what a request sees — outputs, the messages between
the cores, failures — is what the generic executor gives."""

from __future__ import annotations

import re
from typing import ClassVar

import pytest
import torch

from tests.narrow import present
from wgc.driver import Driver
from wgc.interp import make_request, node_context, run_request, segment
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.node import Node, NodeInputError
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.local import LocalCluster

PLAIN = """\
model plain_demo

node a: stateless {
  impl "tests.unit.test_direct_dispatch:AddOne"
  in  x: f32[]
  out x: f32[]
}
node b: like a {}
node c: like a {}

walk w(x: f32[]) {
  a(x) -> x1 = x
  b(x = x1) -> x2 = x
  emit x2 as tensor
  c(x = x2) -> x3 = x
  emit x3 as tensor
}

flow main {
  for seg in request.inputs {
    w(x = seg)
  }
}
"""

AB_C = """\
devices: [cpu, cpu]
place:
  - nodes: [a, b]
    ranks: [0]
  - nodes: [c]
    ranks: [1]
"""

AC_B = """\
devices: [cpu, cpu]
place:
  - nodes: [a, c]
    ranks: [0]
  - nodes: [b]
    ranks: [1]
"""


class AddOne(Node):
    """x + 1; raises on ``fail_on`` (a `NodeInputError` when ``refuse``), or returns a wrong
    port on ``wrong_on``."""

    fail_on: float | None = None
    refuse = False
    wrong_on: float | None = None
    calls: ClassVar[list[str]] = []

    def forward_one(self, inputs, ctx):
        x = float(present(inputs["x"]))
        type(self).calls.append(self.name)
        if x == type(self).fail_on:
            raise (NodeInputError if type(self).refuse else RuntimeError)(f"no {x}")
        if x == type(self).wrong_on:
            return {"y": torch.tensor(x)}
        return {"x": present(inputs["x"]) + 1}


class Batched(AddOne):
    """The same, with a batched `forward` (it could gain from a batch)."""

    def forward(self, batch):
        return [self.forward_one(w.inputs, w.ctx) for w in batch]


def _compiled(tmp_path, placement: str, walk: str = PLAIN):
    AddOne.fail_on, AddOne.refuse, AddOne.wrong_on, AddOne.calls = None, False, None, []
    (tmp_path / "m.walk").write_text(walk, encoding="utf-8")
    (tmp_path / "p.yaml").write_text(placement, encoding="utf-8")
    result = Driver().compile(str(tmp_path / "m.walk"), str(tmp_path / "p.yaml"))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    out = tmp_path / "gen"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text, encoding="utf-8")
    return present(result.model, "model"), out, result.files


def _nodes(model, names, cls=AddOne):
    return {n.name: cls(node_context(n)) for n in model.nodes if n.name in names}


def _run(model, folder, x: float, direct: bool, cls=AddOne, max_batch: int | None = None):
    cluster = LocalCluster(
        folder,
        nodes_factory=lambda r: _nodes(model, {n.name for n in r.nodes}, cls),
        direct=direct,
        max_batch=max_batch,
    )
    cluster.log = []
    req = make_request(model, [segment("tensor", torch.tensor(x))], ["tensor"])
    h = cluster.submit(req).result()
    traffic = [(to, type(m).__name__, getattr(m, "walk", None)) for to, m in cluster.log]
    assert all(not ex.requests for ex in cluster.ranks.values())
    return cluster, h, traffic


def test_plain_pieces_are_written_as_straight_code_with_their_walk_lines(tmp_path) -> None:
    _, folder, files = _compiled(tmp_path, AB_C)
    _, ranks = load_plan(folder)
    assert [p.direct is not None for r in ranks for p in r.pieces] == [True, True]
    rank0 = files["rank_0.py"]
    assert "def direct_w(bind):" in rank0 and "direct=direct_w," in rank0
    # node after node with the values as locals, the walk's line above each call, the value
    # for rank 1 and the client's sent right after the call that made it
    body = rank0[rank0.index("    def run(w, v_x):") : rank0.index("    return run")]
    assert re.sub(r"# \S*m\.walk:", "# m.walk:", body).splitlines()[1:] == [
        "        # m.walk:12",
        '        v_x1 = call_0(w, {"x": v_x})["x"]',
        "        # m.walk:13",
        '        v_x2 = call_1(w, {"x": v_x1})["x"]',
        "        send_1_0(w, v_x2)",
        "        send_1_1(w, v_x2)",
        "",
    ]
    assert '"direct"' not in files["plan.json"]  # code, never data


def test_a_piece_with_two_values_from_elsewhere_or_a_loop_keeps_the_generic_path(tmp_path):
    _, folder, _ = _compiled(tmp_path, AC_B)
    _, ranks = load_plan(folder)
    # rank 0 runs a, then c on rank 1's value: two ways in, so the generic executor waits
    assert [p.direct is None for p in ranks[0].pieces] == [True]
    assert [p.direct is not None for p in ranks[1].pieces] == [True]
    looped = tmp_path / "looped"
    looped.mkdir()
    body = PLAIN[PLAIN.index("  a(x)") : PLAIN.index("}\n\nflow")]
    loop = PLAIN.replace(body, "  loop L max 2 {\n" + body.replace("  ", "    ") + "  }\n")
    _, folder2, _ = _compiled(looped, AB_C, loop)
    _, ranks2 = load_plan(folder2)
    assert ranks2[0].pieces[0].direct is None


@pytest.mark.parametrize("placement", [AB_C, AC_B], ids=["plain", "two-entries"])
def test_direct_runs_equal_the_generic_executor_and_the_interpreter(tmp_path, placement):
    model, folder, _ = _compiled(tmp_path, placement)
    req = make_request(model, [segment("tensor", torch.tensor(1.0))], ["tensor"])
    ref = run_request(model, req, nodes=_nodes(model, {"a", "b", "c"}))
    assert sorted(float(present(v)) for v in ref.of("tensor")) == [3.0, 4.0]
    seen = []
    for direct in (True, False):
        cluster, h, traffic = _run(model, folder, 1.0, direct)
        assert h.ok, h.error
        got = {o.channel: float(present(o.tensor)) for o in h.outputs}
        assert got == {"x2": 3.0, "x3": 4.0}
        seen.append(traffic)
        taken = sum(len(ex.direct.entries) for ex in cluster.ranks.values())
        assert taken == (0 if not direct else (2 if placement is AB_C else 1))
    assert seen[0] == seen[1]  # the same messages between the cores, in the same order


@pytest.mark.parametrize("refuse", [False, True], ids=["raises", "refuses-input"])
def test_a_node_that_raises_fails_the_request_as_the_generic_executor_does(tmp_path, refuse):
    model, folder, _ = _compiled(tmp_path, AB_C)
    AddOne.fail_on, AddOne.refuse = 2.0, refuse  # b raises: c never runs
    errors = []
    for direct in (True, False):
        AddOne.calls = []
        _, h, _ = _run(model, folder, 1.0, direct)
        assert not h.ok and h.error is not None
        assert AddOne.calls == ["a", "b"]
        errors.append(h.error)
    assert errors[0] == errors[1]
    assert errors[0].kind == FailKind.NODE and "node `b` failed in walk `w`" in errors[0].message


def test_wrong_outputs_fail_with_the_output_check(tmp_path) -> None:
    model, folder, _ = _compiled(tmp_path, AB_C)
    AddOne.wrong_on = 1.0  # a returns `y`, not `x`
    errors = []
    for direct in (True, False):
        AddOne.calls = []
        _, h, _ = _run(model, folder, 1.0, direct)
        assert not h.ok and h.error is not None and AddOne.calls == ["a"]
        errors.append(h.error)
    assert errors[0] == errors[1] and errors[0].kind == FailKind.OUTPUT


def test_a_batched_node_on_a_batching_rank_keeps_its_batches(tmp_path) -> None:
    model, folder, _ = _compiled(tmp_path, AB_C)
    cluster, h, _ = _run(model, folder, 1.0, True, cls=Batched)
    assert h.ok and all(not ex.direct.entries for ex in cluster.ranks.values())
    cluster, h, _ = _run(model, folder, 1.0, True, cls=Batched, max_batch=1)
    assert h.ok and all(ex.direct.entries for ex in cluster.ranks.values())
    assert {o.channel: float(present(o.tensor)) for o in h.outputs} == {"x2": 3.0, "x3": 4.0}


def test_direct_calls_are_counted_in_the_node_stats(tmp_path) -> None:
    model, folder, _ = _compiled(tmp_path, AB_C)
    cluster, h, _ = _run(model, folder, 1.0, True)
    assert h.ok
    assert {n: s.rows for n, s in cluster.ranks[0].stats.nodes.items()} == {"a": 1, "b": 1}
    assert {n: s.rows for n, s in cluster.ranks[1].stats.nodes.items()} == {"c": 1}
