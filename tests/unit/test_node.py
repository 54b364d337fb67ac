"""The node interface: output checks against declared port types, contexts, conversions."""

from __future__ import annotations

import pytest
import torch

from tests.narrow import present
from wgc_runtime.contract.node import (
    CallContext,
    Node,
    NodeContext,
    NodeOutputError,
    Work,
    check_outputs,
    to_tensor,
)
from wgc_runtime.contract.spec import TypeSpec

PORTS = {"latents": TypeSpec("f32", (16, 8)), "tokens": ("i64", ("T",)), "stop": ("bool", ())}


def test_good_outputs_pass():
    check_outputs(
        "LLM",
        PORTS,
        {"latents": torch.zeros(16, 8), "tokens": torch.zeros(5, dtype=torch.int64)},
        required=["latents"],
    )


@pytest.mark.parametrize(
    ("outputs", "required", "fragment"),
    [
        ({"latents": torch.zeros(16, 8, dtype=torch.float16)}, (), "expected dtype f32"),
        ({"latents": torch.zeros(16, 9)}, (), "dim 1 is 9, not 8"),
        ({"latents": torch.zeros(16)}, (), "expected rank 2"),
        ({"stop": True}, (), "expected a tensor bool[]"),
        ({"velocity": torch.zeros(1)}, (), "unknown port `velocity`"),
        ({}, ("stop",), "did not return output port `stop`"),
        ([torch.zeros(1)], (), "returned list"),
    ],
)
def test_bad_outputs_name_node_port_and_types(outputs, required, fragment):
    with pytest.raises(NodeOutputError) as err:
        check_outputs("LLM", PORTS, outputs, required=required)
    assert fragment in str(err.value) and "`LLM`" in str(err.value)


def test_forward_defaults_to_forward_one_per_request():
    class Echo(Node):
        def forward_one(self, inputs, ctx):
            return {"y": present(inputs["x"]) + ctx.iteration[0]}

    node = Echo(NodeContext(name="echo", outputs={"y": ("f32", ())}))
    batch = [
        Work({"x": torch.tensor(1.0)}, CallContext(request_id=r, walk="w", call=0, iteration=(i,)))
        for i, r in enumerate("ab")
    ]
    assert [o["y"].item() for o in node.forward(batch)] == [1.0, 2.0]
    assert node.out_shape("y") == ()


def test_seeds_are_deterministic_and_scoped():
    a = CallContext(request_id="r", walk="w", call=1, iteration=(0,))
    b = CallContext(request_id="r", walk="w", call=2, iteration=(0,))
    assert a.seed() == CallContext(request_id="r", walk="w", call=1, iteration=(0,)).seed()
    assert a.seed() != b.seed()
    assert a.request_seed("noise") == b.request_seed("noise")


def test_to_tensor():
    assert present(to_tensor("hi")).tolist() == [104, 105]
    assert (
        present(to_tensor(3)).dtype == torch.int64 and present(to_tensor(True)).dtype == torch.bool
    )
    assert present(to_tensor(0.5)).dtype == torch.float32 and to_tensor(None) is None
