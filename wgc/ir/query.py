"""Read-only questions about the IR that several passes and later stages ask."""

from __future__ import annotations

from wgc.ir.model import Model
from wgc.ir.types import TensorType
from wgc.ir.walk import EdgeKind, EndKind, Walk


def consumer_port_type(model: Model, walk: Walk, call_id: int, port: str) -> TensorType | None:
    call = walk.calls[call_id]
    node = model.node(call.node)
    p = node.input(port) if node else None
    return p.type if p else None


def walk_input_type(model: Model, walk: Walk, name: str) -> TensorType | None:
    """The declared type of walk input ``name``, else the type of the first port it feeds."""
    inp = walk.input(name)
    if inp is None:
        return None
    if inp.type is not None:
        return inp.type
    for e in walk.edges:
        if e.src.kind is EndKind.INPUT and e.src.name == name and e.dst.kind is EndKind.CALL:
            assert e.dst.call is not None and e.dst.port is not None
            t = consumer_port_type(model, walk, e.dst.call, e.dst.port)
            if t is not None:
                return t
    return None


def persisted_channels(model: Model, walk: Walk) -> dict[str, TensorType | None]:
    """Channels ``walk`` persists, with the type of the persisted value."""
    out: dict[str, TensorType | None] = {}
    for e in walk.edges:
        if e.kind is EdgeKind.PERSISTED:
            out.setdefault(e.channel, e.type)
    return out
