"""Pass `names` (placeholder until implemented)."""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Diagnostic
from wgc.ir.model import Model

NAME = "names"
CODES: tuple[str, ...] = ()


def run(model: Model) -> list[Diagnostic]:
    return []
