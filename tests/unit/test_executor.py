"""The runtime's execution cores in one process: the message protocol, `until` loops with and
without speculation across ranks, deadlines and the admission cap of the conductor."""

from __future__ import annotations

import pytest
import torch

from tests.narrow import all_present, present
from wgc.driver import Driver
from wgc.interp import make_request, node_context, run_request, segment
from wgc_runtime.contract import messages as M
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.kinds import DestKind, Edge, FailKind
from wgc_runtime.contract.node import Node
from wgc_runtime.contract.spec import Dest
from wgc_runtime.core.conductor import ConductorCore
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.local import LocalCluster
from wgc_runtime.host.transport.codec import Codec, CodecError

# ---------------------------------------------------------------------------------- messages


def _samples() -> list[M.Message]:
    d = Dest(
        kind=DestKind.CALL, edge=Edge.LOOP_INIT, rank=1, call=2, port="x", loop="L", ranks=(0, 1)
    )
    return [
        M.StartWalk("r", 1, "w", "main", (("think", True), ("n", 3))),
        M.ForwardPersisted("r", 1, "w", "main", "token", "new_token", (d,)),
        M.StreamDone("r", "s"),
        M.StreamAbandon("r", "s"),
        M.SkipChunk("r", "s", 3),
        M.Release("r", "cancelled"),
        M.ForgetSession("chat"),
        M.ExportState("r", 1, "LLM", (0, 1), (2, 3)),
        M.CopyKv("r", 2, "LLM", "cfg_text", "LLM", (0,), (1,)),
        M.StatePart("r", 1, "LLM", "int:context", 0, {"slot": 2, "nbytes": 8}),
        M.StateEnd("r", 1, "LLM", 0, 1),
        M.StateImported("r", 1, "LLM", 2),
        M.Value("r", 1, "w", 2, "x", Edge.LOOP_CARRIED, "L", (("L", 4),), False, None),
        M.Until("r", 1, "w", "L", (2,), 5, True),
        M.StreamItem("r", "s", 7, 0, {"slot": 3, "nbytes": 64}),
        M.StreamItem("r", "s", 1, 0, None, (("seed", 7), ("voice", "leo"))),
        M.StreamAck("r", "s", 7, 1),
        M.StreamAcks("s", 1, ("r", "q"), (7, 2)),
        M.WalkDone("r", 1, "w", 0),
        M.WalkDone("r\x1f3\x1fclient-1-ab", 1, "w", 0, 2),
        M.ChunkReady("r", "s", 2, False, True),
        M.ChunksDone("r", "s", 3, 1),
        M.ChunksDone("r", "s", 3, 1, 4),
        M.ClientOut("r", 1, "w", "main", "text", "token", (3,), None),
        M.Emitted("r\x1f3\x1fclient-1-ab", 2, 1),
        M.Failed("r", FailKind.NODE, "boom", "main", "w", "LLM", 0),
        M.Output("r", "main", "w", "text", "token", (1,), 5),
        M.Output("r\x1f3\x1fclient-1-ab", "main", "w", "text", "token", (1,), 5, True),
        M.Finished("r", False, FailKind.TIMEOUT, "late", None, None, None),
        M.Finished("r", True, outputs=3),
    ]


CODEC = Codec((*M.CORE, M.Output, M.Finished))


@pytest.mark.parametrize("msg", _samples(), ids=lambda m: type(m).__name__)
def test_every_message_round_trips_through_the_typed_codec(msg: M.Message) -> None:
    (back,) = CODEC.decode(CODEC.encode([msg]))
    assert type(back) is type(msg) and back == msg


def test_tensors_travel_as_extensions_and_other_objects_never() -> None:
    v = M.Value("r", 1, "w", 0, "x", Edge.INPUT, data=torch.arange(6.0).reshape(2, 3))
    (back,) = CODEC.decode(CODEC.encode([v]))
    assert torch.equal(back.data, v.data)
    with pytest.raises(CodecError, match="cannot encode object"):
        CODEC.encode([M.Value("r", 1, "w", 0, "x", Edge.INPUT, data=object())])
    assert set(M.CORE) | {M.Output, M.Finished} == {type(m) for m in _samples()}


# ---------------------------------------------------------------------------------- until loops

SPEC_DEMO = """\
model spec_demo

node step: stateless {
  impl "tests.unit.test_executor:Step"
  in  x: f32[]
  out x: f32[]
}

node judge: stateless {
  impl "tests.unit.test_executor:Judge"
  in  x:    f32[]
  out stop: bool[]
}

walk run(x: f32[]) {
  loop L max 8 until stop MODIFIER {
    step(x) -> x
    judge(x) -> stop
    emit x as tensor
  }
}

flow main {
  for seg in request.inputs {
    match seg.modality {
      tensor => run(x = seg)
    }
  }
}
"""

TWO_RANKS = """\
devices: [cpu, cpu]
place:
  - nodes: [step]
    ranks: [0]
  - nodes: [judge]
    ranks: [1]
"""


class Step(Node):
    calls = 0

    def forward_one(self, inputs, ctx):
        type(self).calls += 1
        return {"x": present(inputs["x"]) + 1}


class Judge(Node):
    def forward_one(self, inputs, ctx):
        return {"stop": present(inputs["x"]) >= 3.5}


CLASSES = {"step": Step, "judge": Judge}


ONE_RANK = """\
devices: [cpu]
place:
  - nodes: [step, judge]
    ranks: [0]
"""


def _compiled(tmp_path, modifier: str, placement_text: str = TWO_RANKS):
    walk = tmp_path / "spec_demo.walk"
    walk.write_text(SPEC_DEMO.replace("MODIFIER", modifier), encoding="utf-8")
    placement = tmp_path / "placement.yaml"
    placement.write_text(placement_text, encoding="utf-8")
    result = Driver().compile(str(walk), str(placement))
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    out = tmp_path / "gen"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text, encoding="utf-8")
    return present(result.model, "model"), out


def _nodes(model, names):
    return {n.name: CLASSES[n.name](node_context(n)) for n in model.nodes if n.name in names}


@pytest.mark.parametrize("modifier", ["", "nospeculate"])
def test_until_across_ranks_never_shows_the_speculative_step(tmp_path, modifier) -> None:
    model, folder = _compiled(tmp_path, modifier)
    req = make_request(model, [segment("tensor", torch.tensor(0.0))], ["tensor"])
    ref = run_request(model, req, nodes=_nodes(model, {"step", "judge"}))
    assert [float(x) for x in all_present(ref.of("tensor"))] == [1.0, 2.0, 3.0, 4.0]

    Step.calls = 0
    cluster = LocalCluster(folder, nodes_factory=lambda r: _nodes(model, {n.name for n in r.nodes}))
    h = cluster.submit(req)
    while not h.done:  # rank 0 runs everything it can before rank 1's stop values arrive
        moved = False
        while cluster.ranks[0].step():
            moved = True
        moved = cluster._drain() or moved
        moved = cluster.ranks[1].step() or moved
        moved = cluster._drain() or moved
        assert moved, "stuck"
    assert h.ok, h.error
    assert [float(o.tensor) for o in h.outputs] == [1.0, 2.0, 3.0, 4.0]
    # rank 0 learns stop_i from rank 1: with speculation it ran step once more (x = 5), held
    # that step's effects and dropped them when stop_3 came back true
    assert Step.calls == (4 if modifier == "nospeculate" else 5)
    assert all(not ex.requests for ex in cluster.ranks.values())


def test_executor_routes_until_to_every_rank_of_the_loop(tmp_path) -> None:
    _, folder = _compiled(tmp_path, "")
    _, ranks = load_plan(folder)
    until = [
        d
        for p in ranks[1].pieces
        for c in p.calls
        for o in c.outputs
        for d in o.dests
        if d.kind == "until"
    ]
    assert [d.ranks for d in until] == [(0, 1)]


def test_a_rank_hands_its_own_values_and_stops_over_without_messages(tmp_path, monkeypatch):
    """A carried value to a call of the same walk run on this rank, and a stop value for a loop
    that runs on this rank only, are kept at once: no `Value` / `Until` is made for them (the
    decode loop's per-token traffic); the run is the reference's."""
    model, folder = _compiled(tmp_path, "", ONE_RANK)
    cluster = LocalCluster(folder, nodes_factory=lambda r: _nodes(model, {"step", "judge"}))
    executor = cluster.ranks[0]
    taken: list[M.Message] = []
    router = executor.router
    on_value, on_until = router.on_value, router.on_until
    monkeypatch.setattr(router, "on_value", lambda m: (taken.append(m), on_value(m)))
    monkeypatch.setattr(router, "on_until", lambda m: (taken.append(m), on_until(m)))
    h = cluster.submit(make_request(model, [segment("tensor", torch.tensor(0.0))], ["tensor"]))
    cluster.run()
    assert h.ok, h.error
    assert [float(o.tensor) for o in h.outputs] == [1.0, 2.0, 3.0, 4.0]
    # messages come only from elsewhere (the walk's input, from the conductor): the carried
    # `x`, `judge`'s input and the stops went straight to their call and loop
    assert taken == []


# ---------------------------------------------------------------------------------- conductor


def _bagel():
    return load_plan("generated/bagel/cpu")


def test_walk_deadline_ends_the_request_with_a_timeout(monkeypatch) -> None:
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[2])
    spec, _ = _bagel()
    sent: list = []
    now = [0.0]
    core = ConductorCore(
        spec, lambda to, m: sent.append((to, m)), clock=lambda: now[0], walk_timeout_s=5.0
    )
    core.submit("a", spec.request([Segment("text", "hi")], ["text"]))
    assert any(isinstance(m, M.StartWalk) for _, m in sent)
    now[0] = 10.0
    core.tick()
    fin = [m for to, m in sent if to == M.CLIENT and isinstance(m, M.Finished)]
    assert len(fin) == 1 and fin[0].kind == "timeout" and not fin[0].ok
    assert "walk `prefill_text` did not finish within 5 s (ranks 0 have not reported)" in (
        fin[0].message or ""
    )
    assert {to for to, m in sent if isinstance(m, M.Release)} == {0}


def test_a_stalled_request_error_carries_the_hosts_notes(monkeypatch) -> None:
    # the process deployment's conductor adds what it knows of rank deaths (`RankWatch.notes`)
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[2])
    spec, _ = _bagel()
    sent: list = []
    now = [0.0]
    core = ConductorCore(
        spec, lambda to, m: sent.append((to, m)), clock=lambda: now[0], idle_timeout_s=5.0
    )
    core.deadlines.notes = lambda rid: [f"rank 1 died while {rid} ran"]
    core.submit("a", spec.request([Segment("text", "hi")], ["text"]))
    now[0] = 6.0
    core.tick()
    (fin,) = [m for to, m in sent if to == M.CLIENT and isinstance(m, M.Finished)]
    assert fin.kind == "timeout" and (fin.message or "").startswith("no progress for 5 s: ")
    assert (fin.message or "").endswith(" [rank 1 died while a ran]")


def test_admission_cap_queues_and_queue_deadline(monkeypatch) -> None:
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[2])
    spec, _ = _bagel()
    sent: list = []
    now = [0.0]
    core = ConductorCore(
        spec,
        lambda to, m: sent.append((to, m)),
        clock=lambda: now[0],
        max_concurrent_requests=1,
        queue_timeout_s=3.0,
        walk_timeout_s=100.0,
        idle_timeout_s=100.0,
    )
    for rid in "abc":
        core.submit(rid, spec.request([Segment("text", "hi")], ["text"]))
    assert core.running() == ["a"] and core.queued() == ["b", "c"]
    core.cancel("b")
    now[0] = 4.0
    core.tick()
    fins = {m.request: m.kind for to, m in sent if isinstance(m, M.Finished)}
    assert fins == {"b": "cancelled", "c": "timeout"}
    assert core.running() == ["a"] and core.queued() == []


def test_loader_hands_each_node_its_capture_units():
    """The compiler's capture plan reaches the engines: the decode loop of orpheus on one CPU
    rank is one shape-static capture unit, and only the node it calls receives it."""
    import importlib.util
    from pathlib import Path

    from wgc_runtime.host.loading import node_captures

    path = Path(__file__).resolve().parents[2] / "generated" / "orpheus" / "cpu" / "rank_0.py"
    spec = importlib.util.spec_from_file_location("orpheus_cpu_rank_0", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rank = module.RANK
    llm = node_captures(rank, "LLM")
    assert [c.loop for c in llm] == ["decode_loop"] and llm[0].buckets
    assert node_captures(rank, "snac_decoder") == ()


def test_a_stop_value_is_true_by_its_first_element() -> None:
    from wgc_runtime.core.executor.state import truth

    assert truth(None) is False and truth(True) is True and truth(0) is False
    assert truth(torch.tensor(True)) is True and truth(torch.tensor([False])) is False
    assert truth(torch.tensor([[1]])) is True and truth(torch.zeros(0)) is False
    assert truth(torch.tensor([1, 0])) is True and truth(torch.tensor([0, 1])) is False
    with torch.inference_mode():
        assert truth(torch.ones(1, dtype=torch.bool).unbind(0)[0]) is True


def test_a_node_reports_start_up_progress_through_its_context() -> None:
    from wgc_runtime.contract.node import NodeContext

    lines: list[str] = []
    ctx = NodeContext(name="vocoder", progress=lines.append)
    ctx.say("compiling")
    NodeContext(name="quiet").say("nobody hears this")
    assert lines == ["`vocoder`: compiling"]
    assert ctx == NodeContext(name="vocoder")  # the listener is no part of what a node is
