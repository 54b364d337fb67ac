"""The reference interpreter on small programs: dataflow order with forward references, loops
(`yield last`, `yield all`, per-iteration `emit`), streams across flows (full chunks at once,
the end of a stream), deadlock detection and the escape-hatch flow protocol."""

from __future__ import annotations

import sys
import types

import torch

from tests.narrow import present
from wgc.driver import Driver
from wgc.interp import make_request, node_context, run_request, segment
from wgc_runtime.contract.flow import Fail, Persisted, RunWalk
from wgc_runtime.contract.node import Node


def compile_text(text: str):
    result = Driver().front_end("t.walk", text)
    assert result.model is not None and not result.errors, [d.message for d in result.errors]
    return result.model


def instances(model, classes: dict[str, type]) -> dict[str, Node]:
    return {n.name: classes[n.name](node_context(n)) for n in model.nodes}


class Inc(Node):
    def forward_one(self, inputs, ctx):
        return {"x": present(inputs["x"]) + present(inputs["k"]), "y": present(inputs["x"]) * 10}


class Dbl(Node):
    def forward_one(self, inputs, ctx):
        return {"y": present(inputs["y"]) * 2}


LOOPS = """
model loops
param n = 3
node inc: stateless {
  impl "t:Inc"
  in  x: f32[]
  in  k: f32[]
  out x: f32[]
  out y: f32[]
}
node dbl: stateless {
  impl "t:Dbl"
  in  y: f32[]
  out y: f32[]
}
walk w(x: f32[], k: f32[]) {
  dbl(y = x2) -> out = y
  emit out as tensor
  loop l max n {
    inc(x, k) -> x, y
    emit x as tensor
  } yield last x yield all y
  dbl(y = x) -> x2 = y
  emit y as tensor
}
flow main {
  for seg in request.inputs {
    match seg.modality {
      tensor => w(x = seg, k = seg.k)
    }
  }
}
"""


def test_dataflow_order_loops_and_yields():
    m = compile_text(LOOPS)
    req = make_request(m, [segment("tensor", torch.tensor(1.0), k=torch.tensor(2.0))], ["tensor"])
    out = run_request(m, req, nodes=instances(m, {"inc": Inc, "dbl": Dbl}))
    assert out.ok, out.error
    values = [present(e.value).tolist() for e in out.emitted]
    # the loop runs first (the forward reference waits for it), emitting x every iteration
    assert values == [3.0, 5.0, 7.0, 28.0, [10.0, 30.0, 50.0]]
    assert [e.iteration for e in out.emitted] == [(0,), (1,), (2,), (), ()]


class Produce(Node):
    def forward_one(self, inputs, ctx):
        return {"v": present(inputs["x"]).float()}


class Consume(Node):
    def forward_one(self, inputs, ctx):
        info = ctx.chunks["v"]
        return {"s": present(inputs["v"]).sum() + 1000 * info.final}


STREAMS = """
model streams
node p: stateless {
  impl "t:Produce"
  in  x: f32[]
  out v: f32[]
}
node c: stateless {
  impl "t:Consume"
  in  v: f32[N]
  out s: f32[]
}
stream s: p.v -> c.v
  chunk fixed(k = 2)
walk prod(x: f32[]) {
  p(x)
}
walk cons() {
  c() -> s
  emit s as tensor
}
flow producer {
  for seg in request.inputs {
    match seg.modality {
      tensor => prod(x = seg)
    }
  }
}
flow consumer {
  cons()
  cons()
  cons()
}
"""


def _stream_run(n: int, text: str = STREAMS):
    m = compile_text(text)
    segs = [segment("tensor", torch.tensor(float(i))) for i in range(n)]
    nodes = instances(m, {"p": Produce, "c": Consume})
    return run_request(m, make_request(m, segs, ["tensor"]), nodes=nodes)


def test_stream_across_flows_with_final_chunk():
    out = _stream_run(5)
    assert out.ok, out.error
    # chunks [0,2) [2,4) [4,5): the last is final (+1000)
    assert [present(e.value).item() for e in out.emitted] == [1.0, 5.0, 1004.0]


def test_exact_multiple_ends_with_an_empty_final_chunk():
    # full chunks [0,2) [2,4) [4,6) are never final; the final chunk is empty (zero rows)
    four_calls = STREAMS.replace("  cons()\n}", "  cons()\n  cons()\n}")
    out = _stream_run(6, four_calls)
    assert out.ok, out.error
    assert [present(e.value).item() for e in out.emitted] == [1.0, 5.0, 9.0, 1000.0]


def test_consuming_past_the_final_chunk_fails():
    out = _stream_run(2)
    assert out.error is not None and out.error.kind == "stream"
    assert "final chunk" in out.error.message and out.error.walk == "cons"


def test_deadlock_is_reported_not_hung():
    text = STREAMS.replace("flow consumer {\n  cons()\n  cons()\n  cons()\n}", "").replace(
        "flow producer {",
        "flow producer {\n  cons()",
    )
    out = _stream_run(3, text)
    assert out.error is not None and out.error.kind == "deadlock"
    assert "stream `s`" in out.error.message


EXTERN = """
model ext
node inc: stateless {
  impl "t:Inc"
  in  x: f32[]
  in  k: f32[]
  out x: f32[]
  out y: f32[]
}
walk step(x: f32[], k: f32[]) {
  inc(x, k) -> z = x
  persist z
  emit z as tensor
}
flow main = "wgc_test_extern_flows:main"
"""


def _extern_main(req):
    seg = req.inputs[0]
    yield RunWalk("step", {"x": seg, "k": 1.0})
    yield RunWalk("step", {"x": Persisted("z"), "k": 0.5})
    if req.option("fail"):
        yield Fail("stopped on purpose")


def test_escape_hatch_flow_protocol(monkeypatch):
    mod = types.ModuleType("wgc_test_extern_flows")
    mod.main = _extern_main  # pyright: ignore[reportAttributeAccessIssue] (a made-up module)
    monkeypatch.setitem(sys.modules, "wgc_test_extern_flows", mod)
    m = compile_text(EXTERN)
    nodes = instances(m, {"inc": Inc})
    seg = [segment("tensor", torch.tensor(1.0))]
    out = run_request(m, make_request(m, seg, ["tensor"], {"fail": False}), nodes=nodes)
    assert out.ok, out.error
    assert [present(e.value).item() for e in out.emitted] == [2.0, 2.5]
    failed = run_request(m, make_request(m, seg, ["tensor"], {"fail": True}), nodes=nodes)
    assert failed.error is not None and failed.error.message == "stopped on purpose"
    assert len(failed.emitted) == 2
