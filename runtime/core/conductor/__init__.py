"""The conductor: runs each request's flows and drives the ranks (`core.ConductorCore`)."""

from wgc_runtime.core.conductor.core import ConductorCore

__all__ = ["ConductorCore"]
