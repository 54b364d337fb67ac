"""Bounded dims (`i64[<=k + 1]`, a step that emits a variable number of tokens): parsed and
formatted as written, typed with their bound, not a dynamic shape inside a loop (no WG302),
planned for capture at the bound (`CaptureSpec.padded`), and checked at run time (WG864). The
misuse diagnostics (WG863, a bounded value into a static port) are in tests/ui/types/."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wgc.driver import Driver
from wgc.fmt import format_source
from wgc.ir.types import Dim, DimKind
from wgc_runtime.contract.node import NodeOutputError, check_outputs

MODEL = """model b

param k = 2

node Step: kv_cache {
  impl "m:Step"
  in  token:    i64[<=k + 1]
  out accepted: i64[<=k + 1]
  out stop:     bool[]
}

walk decode(token: i64[1]) {
  loop steps max 8 until stop {
    emit token as text
    Step(token) -> token = accepted, stop
  }
}

flow main {
  for seg in request.inputs {
    match seg.modality {
      text => decode(token = seg)
      _    => fail "send a token"
    }
  }
}
"""
PLACEMENT = """devices: [cpu]
place:
  - nodes: [Step]
    ranks: [0]
kv_cache: {page_size: 16, pages: 64, dtype: f32}
batching: {max_batch: 4, capture: [1, 2, 4]}
"""


def test_a_bounded_dim_is_formatted_as_written_and_typed_with_its_bound() -> None:
    assert format_source(MODEL, "b.walk").text == MODEL
    squeezed = MODEL.replace("i64[<=k + 1]", "i64[ <= k+1 ]")
    assert format_source(squeezed, "b.walk").text == MODEL
    front = Driver().front_end("b.walk", MODEL)
    assert front.model is not None and not front.diagnostics, [
        (d.code, d.message) for d in front.diagnostics
    ]
    step = front.model.node("Step")
    assert step is not None
    port = step.output("accepted")
    assert port is not None and port.type is not None
    (dim,) = port.type.dims
    assert (dim.kind, dim.value, str(dim)) == (DimKind.BOUNDED, 3, "<=k + 1")


def test_bounded_dims_agree_with_what_fits_their_bound() -> None:
    b3 = Dim.bounded("3", 3)
    assert b3.agrees(Dim.bounded("k + 1", 3)) and not b3.agrees(Dim.bounded("4", 4))
    assert Dim.int_(1).agrees(b3) and Dim.int_(3).agrees(b3)  # a static value into the port
    assert not Dim.int_(4).agrees(b3)  # more than the bound
    assert not b3.agrees(Dim.int_(3))  # a bounded value into a static port: may be shorter
    assert b3.agrees(Dim.sym("T")) and Dim.sym("T").agrees(b3)


def test_the_capture_plan_sizes_a_bounded_unit_at_its_bound(tmp_path: Path) -> None:
    (tmp_path / "b.walk").write_text(MODEL)
    (tmp_path / "p.yaml").write_text(PLACEMENT)
    res = Driver().compile(str(tmp_path / "b.walk"), str(tmp_path / "p.yaml"))
    assert res.ok and res.plan is not None, [d.message for d in res.diagnostics]
    (cap,) = res.plan.ranks[0].captures  # one entry: not one per length
    assert cap.loop == "steps" and cap.buckets == (1, 2, 4)
    ports = {name: (t.dtype, t.dims) for name, t in cap.ports}
    assert ports == {"0#token": ("i64", (3,)), "0#accepted": ("i64", (3,)), "0#stop": ("bool", ())}
    assert cap.padded == ("0#token", "0#accepted")
    piece = res.plan.ranks[0].piece("decode")
    assert piece is not None
    call = piece.call(0)
    assert call is not None
    assert {p.port: p.type.dims for p in call.outputs if p.type} == {
        "accepted": ("<=3",),
        "stop": (),
    }


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_node_may_return_up_to_the_bound(n: int) -> None:
    types = {"accepted": ("i64", ("<=3",))}
    check_outputs("Verify", types, {"accepted": torch.arange(n)})


def test_more_than_the_bound_is_a_coded_error() -> None:
    types = {"accepted": ("i64", ("<=3",))}
    with pytest.raises(NodeOutputError) as err:
        check_outputs("Verify", types, {"accepted": torch.tensor([5, 9, 2, 7])})
    assert str(err.value) == (
        "WG864: node `Verify` output `accepted`: expected i64[<=3], got i64[4] "
        "(dim 0 holds 4, more than its bound 3)"
    )
