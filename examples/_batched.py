"""`Batched`: the base of the examples' nodes that implement the batched ``forward`` (every ready
call of one walk across requests in one pass); their ``forward_one`` is a batch of one, so a
caller that goes call by call (a wrapper in a test, a tool) gets the same result."""

from __future__ import annotations

import torch

from wgc_runtime.contract.node import CallContext, Node, NodeError, Work


class Batched(Node):
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        (out,) = self.forward([Work(inputs, ctx)])
        if isinstance(out, Exception):
            raise out
        return out


def need(inputs: dict[str, torch.Tensor | None], port: str, node: str) -> torch.Tensor:
    """Input ``port``'s value, or a `NodeError` naming the node when the call lacks it."""
    value = inputs.get(port)
    if value is None:
        raise NodeError(f"node `{node}`: the call needs input `{port}`")
    return value
