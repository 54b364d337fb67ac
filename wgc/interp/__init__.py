"""The reference interpreter: the executable specification of what a `.walk` model means.

Single process, eager, unbatched, straight from the verified IR: no plan, no placement, no
processes. The compiled runtime must produce exactly what this produces (compare with
`Outputs.by_key` / `same_outputs`). See `interp` (requests, flows side by side, streams),
`walks` (scopes, frames, loops) and `flows` (flow statements and the escape hatch).

It imports only the runtime's public API (`wgc_runtime.contract.node`, `wgc_runtime.core.streams`,
`wgc_runtime.contract.spec`), never runtime internals.
"""

from wgc.interp.interp import Interpreter, load_nodes, node_context, run_request, type_spec
from wgc.interp.request import (
    Emitted,
    Outputs,
    RequestError,
    make_request,
    same_outputs,
    segment,
)


def load_model(path: str):
    """The verified IR of ``path``; raises ValueError listing the errors if it has any."""
    from wgc.driver import Driver

    result = Driver().front_end(path)
    if result.model is None or result.errors:
        msgs = "; ".join(f"{d.code}: {d.message}" for d in result.errors)
        raise ValueError(f"{path} does not compile: {msgs}")
    return result.model


__all__ = [
    "Emitted",
    "Interpreter",
    "Outputs",
    "RequestError",
    "load_model",
    "load_nodes",
    "make_request",
    "node_context",
    "run_request",
    "same_outputs",
    "segment",
    "type_spec",
]
