"""Node classes for the `--imports` UI tests (`tests/ui/imports/*.walk`)."""

from __future__ import annotations

import torch

from wgc_runtime.contract.node import Node


class Encoder(Node):
    INPUTS = ("x",)
    OUTPUTS = ("y",)

    def forward_one(self, inputs, ctx):
        x = inputs["x"]
        assert x is not None
        return {"y": x * 2}


class Lazy(Node):
    """Implements neither `forward` nor `forward_one`."""


class Plain:
    """Not a `Node`."""


class Renamed(Node):
    INPUTS = ("x", "mask")
    OUTPUTS = ("y",)

    def forward_one(self, inputs, ctx):
        return {"y": torch.zeros(4)}
