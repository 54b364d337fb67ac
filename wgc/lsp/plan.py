"""The live plan: the placed plan of a saved model as `wgc show --placement P --format html` draws
it (one self-contained page), for the editor to show beside the file.

The plan is computed from the files on disk, as `wgc show` computes it, so it follows saves:
the extension asks again on every save. The placement is the one the request names, else
`placements/cpu.yaml` beside the model (`wgc run`'s default), else the first placement file
there. When the model or placement has errors the answer carries them as text instead of a
page.
"""

from __future__ import annotations

from pathlib import Path

from wgc.diagnostics.render import render_text
from wgc.driver import Driver
from wgc.lsp.placement_refs import placements_of


def default_placement(model_path: str) -> str | None:
    found = placements_of(model_path)
    cpu = [p for p in found if Path(p).name == "cpu.yaml"]
    return (cpu or found or [None])[0]


def live_plan(model_path: str, placement: str | None) -> dict:
    """``{"html": ..., "placement": ...}`` or ``{"error": ..., "placement": ...}``."""
    from wgc.show.plan import render_plan

    placement = placement or default_placement(model_path)
    if placement is None:
        return {"error": f"no placement file found for `{model_path}`", "placement": None}
    result = Driver().plan(model_path, placement)
    if not result.ok or result.plan is None:
        text = render_text(result.errors or result.diagnostics, result.sources, color=False)
        return {"error": text or "the plan could not be built", "placement": placement}
    return {"html": render_plan(result.plan, "html"), "placement": placement}
