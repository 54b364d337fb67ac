"""The verifier: one pass per module, each `run(model) -> list[Diagnostic]`, pure.

`PIPELINE` is the one literal tuple of passes, in order; `--dump-after PASS` names them by
their module name.
"""

from wgc.passes import (
    chunk_policy,
    dataflow,
    disjointness,
    flows,
    loop_shape,
    names,
    types,
    unused,
)

PIPELINE = (names, types, loop_shape, disjointness, chunk_policy, dataflow, flows, unused)

__all__ = ["PIPELINE"]
