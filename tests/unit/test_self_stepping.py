"""Self-stepping loops (`wgc_runtime.core.executor.stepping`): a decode loop's next iteration
started in place. Which calls qualify, and that the in-place path leaves what the general
routing leaves: the same outputs as the reference interpreter and as the executor with the path
turned off, every iteration but the last stepped in place, nothing kept after a request ends."""

from __future__ import annotations

import pytest
import torch

from tests.narrow import all_present, present
from wgc.driver import Driver
from wgc.interp import make_request, node_context, run_request, segment
from wgc_runtime.contract.node import Node
from wgc_runtime.core.executor import stepping
from wgc_runtime.core.executor.stepping import SelfStep, self_stepping
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.local import LocalCluster

WALK = """\
model tight_demo

node prep: stateless {
  impl "tests.unit.test_self_stepping:Prep"
  in  tok: i64[1]
  out inc: i64[1]
}

node dec: stateless {
  impl "tests.unit.test_self_stepping:Dec"
  in  tok:     i64[1]
  in  inc:     i64[1]
  out new_tok: i64[1]
  out stop:    bool[]
}

node total: stateless {
  impl "tests.unit.test_self_stepping:Total"
  in  window: i64[2]
  out sum:    i64[]
}

walk decode(tok: i64[1]) {
  prep(tok) -> inc
  loop L max 6 until stop {
    dec(tok, inc) -> tok = new_tok, stop
    BODY
  }
}

walk chunk() {
  total() -> sum
  emit sum as tensor
}

stream s: dec.new_tok -> total.window
  chunk sliding(window = 2, stride = 1)
  final drop

flow main {
  for seg in request.inputs {
    match seg.modality {
      tensor => decode(tok = seg)
    }
  }
}

flow codec on s {
  chunk()
}
"""

ONE_RANK = """\
devices: [cpu]
place:
  - nodes: [prep, dec, total]
    ranks: [0]
"""

TWO_RANKS = """\
devices: [cpu, cpu]
place:
  - nodes: [prep, dec]
    ranks: [0]
  - nodes: [total]
    ranks: [1]
"""


class Prep(Node):
    def forward_one(self, inputs, ctx):
        return {"inc": present(inputs["tok"]) % 2 + 1}  # odd starts count by 2, even by 1


class Dec(Node):
    def forward_one(self, inputs, ctx):
        new = present(inputs["tok"]) + present(inputs["inc"])
        return {"new_tok": new, "stop": new[0] >= 7}


class Twice(Node):
    def forward_one(self, inputs, ctx):
        return {"y": present(inputs["tok"]) * 2}


class Total(Node):
    def forward_one(self, inputs, ctx):
        return {"sum": present(inputs["window"]).sum()}


CLASSES = {"prep": Prep, "dec": Dec, "total": Total, "twice": Twice}


def _compiled(tmp_path, placement: str, walk_text: str = WALK.replace("BODY", "")):
    """The model and the folder its plan is written to."""
    walk = tmp_path / "tight_demo.walk"
    walk.write_text(walk_text, encoding="utf-8")
    place = tmp_path / "placement.yaml"
    place.write_text(placement, encoding="utf-8")
    result = Driver().compile(str(walk), str(place))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    out = tmp_path / "gen"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text, encoding="utf-8")
    return present(result.model, "model"), out


def _nodes(model, names):
    return {n.name: CLASSES[n.name](node_context(n)) for n in model.nodes if n.name in names}


def _cluster(model, folder, in_place: bool) -> LocalCluster:
    cluster = LocalCluster(folder, nodes_factory=lambda r: _nodes(model, {n.name for n in r.nodes}))
    if not in_place:
        for ex in cluster.ranks.values():
            ex.stepper.steps.clear()
    return cluster


def test_the_decode_loop_shape_is_found(tmp_path) -> None:
    _, folder = _compiled(tmp_path, TWO_RANKS)
    _, ranks = load_plan(folder)
    found = self_stepping(ranks[0])
    assert list(found.values()) == [
        SelfStep(
            loop="L", max=6, stop="stop", carried=(("new_tok", "tok"),), once=("inc",), solo=True
        )
    ]
    assert self_stepping(ranks[1]) == {}  # the stream's consumer has no loop


TWICE = """\
node twice: stateless {
  impl "tests.unit.test_self_stepping:Twice"
  in  tok: i64[1]
  out y:   i64[1]
}

"""


@pytest.mark.parametrize(
    "body",
    [
        "emit tok as tensor",  # a value to the client each iteration: the general routing
        "twice(tok) -> y",  # a second call in the body
    ],
)
def test_a_loop_that_does_more_than_feed_itself_is_not_self_stepping(tmp_path, body) -> None:
    walk = WALK.replace("BODY", body).replace("node total:", TWICE + "node total:")
    _, out = _compiled(tmp_path, ONE_RANK.replace("total]", "total, twice]"), walk)
    _, ranks = load_plan(out)
    assert self_stepping(ranks[0]) == {}


def _run(cluster: LocalCluster, model, starts) -> list[list[float]]:
    handles = [
        cluster.submit(make_request(model, [segment("tensor", torch.tensor([s]))], ["tensor"]))
        for s in starts
    ]
    cluster.run()
    assert all(h.ok for h in handles), [h.error for h in handles]
    return [[float(o.tensor) for o in h.outputs] for h in handles]


@pytest.mark.parametrize("placement", [ONE_RANK, TWO_RANKS], ids=["one-rank", "two-ranks"])
def test_in_place_steps_equal_the_general_routing_and_the_reference(
    tmp_path, monkeypatch, placement
) -> None:
    model, folder = _compiled(tmp_path, placement)
    # starts 0 (7 tokens wanted: `max 6` ends it), 1 (by 2: 3 5 7), 4 (5 6 7) and 6 (one step)
    starts = [0, 1, 4, 6]
    want = []
    for s in starts:
        req = make_request(model, [segment("tensor", torch.tensor([s]))], ["tensor"])
        ref = run_request(model, req, nodes=_nodes(model, set(CLASSES)))
        want.append([float(x) for x in all_present(ref.of("tensor"))])
    assert want[0] == [3.0, 5.0, 7.0, 9.0, 11.0]  # tokens 1..6, summed in windows of two
    stepped: list[bool] = []
    step_on = stepping.Stepper.step_on
    monkeypatch.setattr(
        stepping.Stepper, "step_on", lambda *a: stepped.append(step_on(*a)) or stepped[-1]
    )
    general = _cluster(model, folder, in_place=False)
    assert _run(general, model, starts) == want
    assert stepped == []  # turned off: never asked
    fast = _cluster(model, folder, in_place=True)
    assert _run(fast, model, starts) == want
    # per request every iteration but its last starts the next in place
    iterations = [6, 3, 3, 1]
    assert stepped.count(True) == sum(n - 1 for n in iterations)
    assert stepped.count(False) == len(starts)
    assert all(not ex.requests for ex in fast.ranks.values())


def test_a_request_cancelled_between_steps_leaves_nothing(tmp_path) -> None:
    model, folder = _compiled(tmp_path, TWO_RANKS)
    cluster = _cluster(model, folder, in_place=True)
    h = cluster.submit(make_request(model, [segment("tensor", torch.tensor([0]))], ["tensor"]), "r")
    keep = cluster.submit(
        make_request(model, [segment("tensor", torch.tensor([1]))], ["tensor"]), "k"
    )
    ex = cluster.ranks[0]
    while not any(
        len(lr.stops) >= 2
        for req in ex.requests.values()
        for w in req.walks.values()
        for lr in w.loops.values()
    ):
        assert cluster.step(), "stuck"
    cluster.cancel("r")  # its next iteration is queued, started in place
    cluster.run()
    assert not h.ok and keep.ok
    assert [float(o.tensor) for o in keep.outputs] == [8.0, 12.0]
    assert all(not e.requests for e in cluster.ranks.values())


def test_a_stream_with_an_earlier_producer_keeps_statement_order(tmp_path) -> None:
    """A call before the loop pushes to the same stream, and becomes ready after the loop's
    first iteration (it waits for `twice`): the loop's call is not its stream's only producer
    (``solo`` false), so its pushes wait for the earlier one; the items come in statement
    order, as the reference's."""
    walk = WALK.replace("BODY", "").replace("node total:", TWICE + "node total:")
    walk = walk.replace(
        "  prep(tok) -> inc\n",
        "  prep(tok) -> inc\n  twice(tok = inc) -> y\n  dec(tok = y, inc) -> first = new_tok\n",
    )
    model, out = _compiled(tmp_path, TWO_RANKS.replace("dec]", "dec, twice]"), walk)
    _, ranks = load_plan(out)
    (step,) = self_stepping(ranks[0]).values()
    assert not step.solo
    want = []
    for s in [0, 1]:
        req = make_request(model, [segment("tensor", torch.tensor([s]))], ["tensor"])
        ref = run_request(model, req, nodes=_nodes(model, set(CLASSES)))
        want.append([float(x) for x in all_present(ref.of("tensor"))])
    # items 2 + 1 = 3 (before the loop), then the loop's 1..6 (from the walk's input)
    assert want[0] == [4.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    assert _run(_cluster(model, out, in_place=True), model, [0, 1]) == want
