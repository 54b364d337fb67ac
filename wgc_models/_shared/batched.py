"""`Batched`: the base of the examples' nodes that implement the batched ``forward`` (every ready
call of one walk across requests in one pass); their ``forward_one`` is a batch of one, so a
caller that goes call by call (a wrapper in a test, a tool) gets the same result. Also the
helpers every example node shares: `need` (an input the call must have), `weights_dtype` (a
node's ``config dtype``) and `cast_weights` (a module's weights in that dtype)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import torch

from wgc_runtime.contract.node import DTYPES, CallContext, Node, NodeError, Work

M = TypeVar("M", bound=torch.nn.Module)


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


def weights_dtype(config: Mapping[str, Any], node: str) -> torch.dtype:
    """The node's ``config dtype``: what its weights compute in (``f32`` by default)."""
    name = str(config.get("dtype") or "f32")
    if name not in ("f32", "bf16", "f16"):
        raise NodeError(f"node `{node}`: `config dtype = {name!r}` (one of f32, bf16, f16)")
    return DTYPES[name]


def cast_weights(module: M, dtype: torch.dtype) -> M:
    """``module`` with its floating parameters and buffers in ``dtype``, except the rotary
    ``inv_freq`` tables, which stay as they were (f32: positions in the thousands need it; the
    cos/sin tables built from them are cast to the activations' dtype, as transformers does)."""
    if dtype == torch.float32:
        return module.float()
    keep = {n: b for n, b in module.named_buffers() if n.rsplit(".", 1)[-1] == "inv_freq"}
    module.to(dtype)
    for name, buf in keep.items():
        owner, _, leaf = name.rpartition(".")
        setattr(module.get_submodule(owner) if owner else module, leaf, buf)
    return module
