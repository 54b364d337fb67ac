"""The `Node` base class a node implementation subclasses, and the default encoding of its
per-request state when the state moves to another rank group (`encode_state`, `decode_state`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from wgc_runtime.contract.capture import CapturedCall, StaticStep
from wgc_runtime.contract.node.context import CallContext, NodeContext, Work
from wgc_runtime.contract.node.errors import NodeError
from wgc_runtime.contract.node.values import DTYPES
from wgc_runtime.contract.spec import type_parts
from wgc_runtime.contract.weights import WeightParts


class Node:
    """Base class of node implementations. Override `forward_one` (one request at a time) or
    `forward` (a batch of ready requests of one walk); optionally `release`, and `expect` with
    `idle` to prepare for a request ahead of its calls.

    ``serves_copies``: True when the class's batched `forward` may be handed, in one batch, the
    ready calls of its ``like`` copies that read its pool on the same rank (a CFG branch's
    passes beside the main one, in a ``par`` block) together with its own: each `Work`'s
    context names its own node, KV handle (label) and state, so the node must read them from
    the work, never from ``self``. The executor then runs the copies' calls in the owner's
    `forward` (one forward instead of one per copy)."""

    serves_copies: ClassVar[bool] = False

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.name = ctx.name
        self.config = dict(ctx.config)
        self.device = torch.device(ctx.device)

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        """The weights a node of this class would hold with ``config`` (its `.walk` config
        values), said before it is built (`wgc_runtime.contract.weights`); none by default."""
        del config
        return ()

    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        """Outputs for every ready call, in order. The default runs `forward_one` per call."""
        return [self.forward_one(w.inputs, w.ctx) for w in batch]

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"node `{self.name}` implements neither forward nor forward_one")

    def release(self, request_id: str) -> None:
        """The request ended; drop anything held for it outside `CallContext.state`. For a
        stateless node called in a piece that leaves nothing behind (`PieceSpec.needs_release`
        false), the request ends here when that piece is done: a later walk of the request
        may call the node again, and release it again."""

    def expect(self, ctx: CallContext) -> None:
        """A request will call this node on this rank: the first item of a stream that feeds
        one of its ports arrived here (once per request and stream, before the stream's first
        chunk). ``ctx`` has the request's id, options and this node's `CallContext.state`
        (``walk`` empty, ``call`` -1). A node may note work it can do ahead for the request
        (e.g. random draws that depend on the request's seed only) to do in `idle`; nothing
        it prepares may change what its calls compute. The default does nothing."""

    def idle(self) -> bool:
        """Do a little of the work noted by `expect` (a fraction of a millisecond: the rank
        looks for messages between calls) while the rank has nothing to run; True when some
        was done, False when none is left. Called only between calls, never with one running;
        the default has none."""
        return False

    def static_step(self, call: CapturedCall) -> StaticStep | Sequence[StaticStep] | None:
        """The call as a shape-static unit the runtime may capture
        (`wgc_runtime.contract.capture`; several: forms of the call, the first that admits a
        batch runs it), or None (the default): the call runs `forward`."""
        return None

    def export_state(self, request_id: str, kept: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The request's state of this node as named tensors, to move it to another rank group
        (prefill/decode disaggregation: the plan's handoffs). ``kept`` is the request's
        `CallContext.state` dict here; the runtime drops it afterwards, and a node keeping state
        elsewhere (KV pages) frees it here: the state *moves*. The default encodes ``kept``
        (`encode_state`: tensors, ints, floats and bools)."""
        return encode_state(self.name, kept)

    def import_state(
        self, request_id: str, state: Mapping[str, torch.Tensor], kept: dict[str, Any]
    ) -> None:
        """Take the state another rank's `export_state` produced for the request, before the
        request's next walk of this node runs here. ``kept`` is the request's (fresh)
        `CallContext.state` dict here. The default decodes ``state`` into it."""
        kept.update(decode_state(state))

    # helpers for implementations
    def out_shape(self, port: str, **symbols: int) -> tuple[int, ...]:
        """The declared static shape of output ``port`` (symbolic dims from ``symbols``)."""
        _, dims = type_parts(self.ctx.outputs[port])
        return tuple(d if isinstance(d, int) else symbols[d] for d in dims)

    def out_dtype(self, port: str) -> torch.dtype:
        return DTYPES[type_parts(self.ctx.outputs[port])[0]]


_STATE_KINDS = {"tensor", "int", "float", "bool"}


def encode_state(node_name: str, kept: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A `CallContext.state` dict as tensors: each entry ``key`` becomes ``"<kind>:key"`` (a
    tensor as it is; an int, float or bool as a 0-dim i64 / f64 / bool tensor), so
    `decode_state` gives back the same values. Anything else raises `NodeError`: the node must
    override `Node.export_state`."""
    out: dict[str, torch.Tensor] = {}
    for key, v in kept.items():
        if isinstance(v, torch.Tensor):
            out[f"tensor:{key}"] = v
        elif isinstance(v, bool):
            out[f"bool:{key}"] = torch.tensor(v, dtype=torch.bool)
        elif isinstance(v, int):
            out[f"int:{key}"] = torch.tensor(v, dtype=torch.int64)
        elif isinstance(v, float):
            out[f"float:{key}"] = torch.tensor(v, dtype=torch.float64)
        else:
            raise NodeError(
                f"node `{node_name}` keeps `{key}` ({type(v).__name__}) in its request state, "
                "which the default `export_state` cannot move (tensors, ints, floats and bools "
                "only): override `export_state` / `import_state`"
            )
    return out


def decode_state(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The inverse of `encode_state` (keys without a known ``kind:`` prefix stay tensors)."""
    out: dict[str, Any] = {}
    for name, t in state.items():
        kind, sep, key = name.partition(":")
        if not sep or kind not in _STATE_KINDS:
            out[name] = t
        elif kind == "tensor":
            out[key] = t
        elif kind == "bool":
            out[key] = bool(t.item())
        elif kind == "int":
            out[key] = int(t.item())
        else:
            out[key] = float(t.item())
    return out
