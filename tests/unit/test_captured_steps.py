"""Captured steps (`wgc_runtime.core.executor.captured`): a node's `static_step` runs the plan's
capturable calls batched and padded to a bucket, computing what its `forward` computes; a
request whose `prepare` raises fails alone; a step whose outputs break the declared types
fails its batch with the node's name; a node without a step runs `forward`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from tests.narrow import present
from wgc.driver import Driver
from wgc_runtime.contract.capture import CapturedCall, StaticPort, StaticStep
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.node import Node, NodeContext, NodeError
from wgc_runtime.host.local import LocalCluster

WALK = """model capt

node Step: stateless {
  impl "unused:Step"
  in  x:    f32[4]
  out y:    f32[4]
  out stop: bool[]
}

walk run(x: f32[4]) {
  loop L max 6 until stop {
    emit x as tensor
    Step(x) -> x = y, stop
  }
}

flow main {
  for seg in request.inputs {
    run(x = seg)
  }
}
"""
PLACEMENT = """devices: [cpu]
place:
  - nodes: [Step]
    ranks: [0]
batching: {max_batch: 8, capture: [2, 4]}
"""


class Step(Node):
    """y = 2x + offset; stop once y sums past 40. ``offset`` comes from `prepare` (a per-row
    extra) on the captured path and from the request option here."""

    broken = False  # the step's `fn` returns the wrong shape

    def forward_one(self, inputs, ctx):
        y = present(inputs["x"]) * 2 + float(ctx.options.get("offset", 0))
        return {"y": y, "stop": y.sum() > 40}

    def static_step(self, call: CapturedCall) -> StaticStep | None:
        assert set(call.inputs) == {"x"} and call.buckets == (2, 4) and call.backend == "eager"
        broken = self.broken

        def fn(bufs):
            y = bufs["x"] * 2 + bufs["offset"][:, None]
            return {"y": y[:, :3] if broken else y, "stop": y.sum(-1) > 40}

        def prepare(work):
            if work.ctx.options.get("offset") == -1:
                raise NodeError("offset -1 is refused")
            return {"offset": float(work.ctx.options.get("offset", 0))}

        return StaticStep(fn=fn, extra={"offset": StaticPort((), "f32", 0.0)}, prepare=prepare)


class Plain(Step):
    def static_step(self, call):
        return None


def _cluster(tmp: Path, cls: type[Node]) -> LocalCluster:
    (tmp / "capt.walk").write_text(WALK)
    (tmp / "p.yaml").write_text(PLACEMENT)
    result = Driver().compile(str(tmp / "capt.walk"), str(tmp / "p.yaml"))
    assert result.ok, [d.message for d in result.errors]
    out = tmp / "plan"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text)

    def factory(rank):
        return {n.name: cls(NodeContext(name=n.name, outputs=dict(n.outputs))) for n in rank.nodes}

    return LocalCluster(out, nodes_factory=factory)


def _serve(c: LocalCluster, offsets: list[float]):
    hs = []
    for i, off in enumerate(offsets):
        x = torch.arange(4, dtype=torch.float32) + i
        req = c.request([Segment("tensor", x)], ["tensor"], {"offset": off} if off else {})
        hs.append(c.submit(req))
    c.run()
    return hs


def _outs(hs):
    return [None if h.error else [o.tensor.tolist() for o in h.outputs] for h in hs]


def test_the_captured_step_computes_what_forward_computes(tmp_path) -> None:
    offsets = [0, 0.5, 1, 0, 2, 0.25]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    captured = _cluster(tmp_path / "a", Step)
    plain = _cluster(tmp_path / "b", Plain)
    got, want = _outs(_serve(captured, offsets)), _outs(_serve(plain, offsets))
    assert got == want and all(g is not None for g in got)
    steps = captured.ranks[0].captured
    assert [u[0] for u in steps.report.units] == ["run:0 Step"]
    assert steps.report.summary().startswith("captured 1 step(s) x 2 bucket(s) (eager) in ")
    assert steps.runs > 0 and max(steps.batch_sizes) > 1 and steps.fallbacks == 0
    assert plain.ranks[0].captured.units == {}
    # 6 requests, buckets [2, 4]: batches of 5-6 ran the plain path (larger than every bucket)
    [unit] = steps.units[("run", 0)]
    assert unit.runner.buckets == [2, 4]


def test_a_prepare_that_raises_fails_only_its_request(tmp_path) -> None:
    c = _cluster(tmp_path, Step)
    hs = _serve(c, [0, -1, 1])
    assert hs[1].error is not None and "offset -1 is refused" in (hs[1].error.message or "")
    assert hs[0].error is None and hs[2].error is None


def test_outputs_that_break_the_types_fail_the_batch_naming_the_node(tmp_path) -> None:
    class Broken(Step):
        broken = True

    c = _cluster(tmp_path, Broken)
    hs = _serve(c, [0, 1])
    for h in hs:
        assert h.error is not None
        assert "node `Step`'s captured step returned" in (h.error.message or "")
        assert "expected f32[2, 4]" in (h.error.message or "")


class Forms(Step):
    """The step in two forms: ``small`` admits batches whose values all stay under 10, ``any``
    every batch; each counts the rows it prepares."""

    prepared: dict[str, int]

    def static_step(self, call):
        self.prepared = {"small": 0, "any": 0}
        base = super().static_step(call)
        assert isinstance(base, StaticStep) and base.prepare is not None
        inner = base.prepare

        def form(label: str, admits) -> StaticStep:
            def prepare(work):
                self.prepared[label] += 1
                return inner(work)

            return StaticStep(base.fn, base.extra, prepare, admits=admits, label=label)

        def small(works):
            return all(float(w.inputs["x"].max()) < 10 for w in works)

        return [form("small", small), form("any", None)]


def test_a_batch_runs_in_the_first_form_that_admits_it(tmp_path) -> None:
    offsets = [0, 0.5, 1, 0.25]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    c = _cluster(tmp_path / "a", Forms)
    got = _outs(_serve(c, offsets))
    assert got == _outs(_serve(_cluster(tmp_path / "b", Plain), offsets))
    steps = c.ranks[0].captured
    assert [u[0] for u in steps.report.units] == ["run:0 Step (small)", "run:0 Step (any)"]
    assert steps.report.summary().startswith("captured 1 step(s) in 2 forms x 2 bucket(s)")
    assert [u.step.label for u in steps.units[("run", 0)]] == ["small", "any"]
    node = c.ranks[0].nodes["Step"]
    assert isinstance(node, Forms)
    # the first iterations' values are small, the later ones are not: both forms ran
    assert node.prepared["small"] > 0 and node.prepared["any"] > 0
    assert steps.fallbacks == 0


def test_a_form_whose_admits_raises_fails_its_batch_not_the_rank(tmp_path) -> None:
    class Raising(Forms):
        def static_step(self, call):
            forms = super().static_step(call)

            def admits(works):
                raise ValueError("admits broke")

            return [replace(forms[0], admits=admits), forms[1]]

    c = _cluster(tmp_path, Raising)
    hs = _serve(c, [0, 1])
    for h in hs:
        assert h.error is not None and "admits broke" in (h.error.message or ""), h.error
    assert not c.ranks[0].requests  # the rank goes on, nothing left behind
