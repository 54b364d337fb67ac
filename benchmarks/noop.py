"""No-op nodes for the runtime benchmarks (`benchmarks/runtime_hops.py`)."""

from __future__ import annotations

from wgc_runtime.contract.node import Node


class Noop(Node):
    """Returns its input unchanged (``x`` in, ``x`` out): pure dispatch cost."""

    def forward(self, batch):
        return [{"x": w.inputs["x"]} for w in batch]
