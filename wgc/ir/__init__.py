"""The typed IR: frozen, slotted dataclasses with source spans (excluded from equality).

`wgc.ir.build` turns a parse tree into a `Model`; `wgc.ir.resolve` infers every walk's channel
edges once, so later stages never re-derive them.
"""

from wgc.ir.decls import (
    ChunkPolicy,
    EngineKind,
    FinalMode,
    Node,
    OptionDecl,
    Param,
    PolicyKind,
    Port,
    PortDir,
    PortRef,
    Stream,
    TypeAlias,
)
from wgc.ir.flow import Flow, FlowKind
from wgc.ir.model import Model
from wgc.ir.types import Dim, DimKind, DType, TensorType
from wgc.ir.walk import (
    Bind,
    Block,
    Call,
    Edge,
    EdgeKind,
    Emit,
    End,
    EndKind,
    Issue,
    IssueKind,
    Loop,
    Par,
    Persist,
    Walk,
    WalkInput,
)

__all__ = [
    "Bind",
    "Block",
    "Call",
    "ChunkPolicy",
    "DType",
    "Dim",
    "DimKind",
    "Edge",
    "EdgeKind",
    "Emit",
    "End",
    "EndKind",
    "EngineKind",
    "FinalMode",
    "Flow",
    "FlowKind",
    "Issue",
    "IssueKind",
    "Loop",
    "Model",
    "Node",
    "OptionDecl",
    "Par",
    "Param",
    "Persist",
    "PolicyKind",
    "Port",
    "PortDir",
    "PortRef",
    "Stream",
    "TensorType",
    "TypeAlias",
    "Walk",
    "WalkInput",
]
