"""One call that loads a placement file and checks it against a model: what `wgc compile`,
`wgc show` and the tests use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wgc.diagnostics.diagnostic import Diagnostic, Span, diag
from wgc.ir.model import Model
from wgc.placement import rules, writable
from wgc.placement.load import load
from wgc.placement.model import Placement


@dataclass
class PlacementResult:
    path: str
    placement: Placement | None
    diagnostics: list[Diagnostic]
    text: str  # the YAML, for quoting lines in diagnostics ("" when unreadable)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]


def check_placement(model: Model | None, path: str, text: str | None = None) -> PlacementResult:
    """Load ``path`` (or ``text``) and, when both exist, run the placement rules on ``model``."""
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            err = diag(
                "WG010",
                f"cannot read `{path}`: {reason}",
                Span(path, 0, 0, 0, 0),
                help="check the path and that the file is UTF-8 text",
            )
            return PlacementResult(path, None, [err], "")
    placement, diags = load(path, text)
    if placement is not None and model is not None:
        diags = diags + rules.run(model, placement) + writable.run(model, placement)
    return PlacementResult(path, placement, sorted(diags, key=Diagnostic.sort_key), text)
