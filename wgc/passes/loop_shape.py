"""Pass `loop_shape` (placeholder until implemented)."""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Diagnostic
from wgc.ir.model import Model

NAME = "loop_shape"
CODES: tuple[str, ...] = ()


def run(model: Model) -> list[Diagnostic]:
    return []
