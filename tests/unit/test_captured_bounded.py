"""A captured call with bounded ports (`i64[<=4]`): its values go into the step padded to the
bound with their lengths (`length_key`), and what it returns comes back cut to the lengths it
chose, batched over requests of different lengths; the replies equal the node's `forward`; a
step that returns no lengths fails its batch naming the node."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wgc.driver import Driver
from wgc_runtime.contract.capture import CapturedCall, StaticStep, length_key
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.node import Node, NodeContext
from wgc_runtime.host.local import LocalCluster

WALK = """model grow

node Grow: stateless {
  impl "unused:Grow"
  in  x:    i64[<=4]
  out y:    i64[<=4]
  out stop: bool[]
}

walk run(x: i64[<=4]) {
  loop L max 6 until stop {
    emit x as tensor
    Grow(x) -> x = y, stop
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
  - nodes: [Grow]
    ranks: [0]
batching: {max_batch: 8, capture: [2, 4]}
"""


class Grow(Node):
    """y: x's first element counted up, one element longer than x (at most 4); stop at 4."""

    lengths = True  # the step returns its output's lengths

    def forward_one(self, inputs, ctx):
        x = inputs["x"]
        assert x is not None
        m = min(x.shape[0] + 1, 4)
        y = x[0] + torch.arange(m, dtype=torch.int64)
        return {"y": y, "stop": torch.tensor(m == 4)}

    def static_step(self, call: CapturedCall) -> StaticStep | None:
        lengths = self.lengths

        def fn(bufs):
            x, n = bufs["x"], bufs[length_key("x")]  # [B, 4] padded, [B]
            m = (n + 1).clamp(max=4)
            pos = torch.arange(4)
            y = torch.where(pos < m[:, None], x[:, :1] + pos, 0)
            out = {"y": y, "stop": m == 4}
            if lengths:
                out[length_key("y")] = m
            return out

        return StaticStep(fn=fn)


class Plain(Grow):
    def static_step(self, call):
        return None


class NoLengths(Grow):
    lengths = False


def _cluster(tmp: Path, cls: type[Node]) -> LocalCluster:
    tmp.mkdir(exist_ok=True)
    (tmp / "grow.walk").write_text(WALK)
    (tmp / "p.yaml").write_text(PLACEMENT)
    result = Driver().compile(str(tmp / "grow.walk"), str(tmp / "p.yaml"))
    assert result.ok, [d.message for d in result.errors]
    out = tmp / "plan"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text)

    def factory(rank):
        return {n.name: cls(NodeContext(name=n.name, outputs=dict(n.outputs))) for n in rank.nodes}

    return LocalCluster(out, nodes_factory=factory)


def _replies(c: LocalCluster) -> list[object]:
    starts = [[5], [7, 8], [1, 2, 3], [9]]  # requests of different lengths batch together
    hs = [c.submit(c.request([Segment("tensor", torch.tensor(s))], ["tensor"])) for s in starts]
    c.run()
    return [str(h.error) if h.error else [o.tensor.tolist() for o in h.outputs] for h in hs]


def test_bounded_ports_are_padded_in_and_cut_back_out(tmp_path: Path) -> None:
    captured = _cluster(tmp_path / "c", Grow)
    got = _replies(captured)
    assert got == _replies(_cluster(tmp_path / "p", Plain))
    assert got[0] == [[5], [5, 6], [5, 6, 7]]  # each step one longer, cut to its length
    steps = captured.ranks[0].captured
    assert steps.runs > 0 and steps.fallbacks == 0 and not steps.report.skipped


def test_a_step_without_its_outputs_lengths_fails_naming_the_node(tmp_path: Path) -> None:
    got = _replies(_cluster(tmp_path, NoLengths))
    assert all(isinstance(r, str) and "no lengths" in r and "Grow" in r for r in got)


@pytest.mark.parametrize("port", ["x", "y"])
def test_the_plan_pads_both_ports(tmp_path: Path, port: str) -> None:
    c = _cluster(tmp_path, Grow)
    (cap,) = c.ranks[0].spec.captures
    assert f"0#{port}" in cap.padded and dict(cap.ports)[f"0#{port}"].dims == (4,)
