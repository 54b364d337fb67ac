"""The conductor: runs each request's flows and drives the ranks (`core.ConductorCore`).

`ConductorCore` is imported on first use: the door (`door`) is torch-free and `wgc run` checks a
request with it before any process starts, while the core's modules import torch."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wgc_runtime.core.conductor.core import ConductorCore

__all__ = ["ConductorCore"]


def __getattr__(name: str) -> Any:
    if name == "ConductorCore":
        from wgc_runtime.core.conductor.core import ConductorCore

        return ConductorCore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
