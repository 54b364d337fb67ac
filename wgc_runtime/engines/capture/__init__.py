"""Graph capture: shape-static units replayed at batch buckets.

`runner` — `GraphRunner`, one unit at every bucket (static buffers, padding, carries; CUDA
graphs on a GPU, eager or compiled elsewhere), and `StaticBuffer`, one static input;
`inductor` — the ``torch.compile`` backend of a bucket (the CPU analogue of a recording);
`units` — units built from the compiler's capture list (`body_unit`, `runner_for`);
`planner` — `MetadataPlanner`, host-side planning of the next step while this one runs.
"""

from wgc_runtime.engines.capture.inductor import inductor_available
from wgc_runtime.engines.capture.planner import MetadataPlanner
from wgc_runtime.engines.capture.runner import (
    BACKENDS,
    GraphError,
    GraphRunner,
    StaticBuffer,
    UnitFn,
    shared_pool,
)
from wgc_runtime.engines.capture.units import BodyUnit, CallFn, body_unit, runner_for, split_ports

__all__ = [
    "BACKENDS",
    "BodyUnit",
    "CallFn",
    "GraphError",
    "GraphRunner",
    "MetadataPlanner",
    "StaticBuffer",
    "UnitFn",
    "body_unit",
    "inductor_available",
    "runner_for",
    "shared_pool",
    "split_ports",
]
