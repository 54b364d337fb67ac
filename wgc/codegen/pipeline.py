"""The whole compile of one (model, placement): front end, placement, overrides, lowering, render.

`compile_model(walk_path, placement_path, sets)` stops at the first stage with errors and returns
its diagnostics (with a `SourceMap` holding both files, so YAML errors quote their line);
otherwise it returns the plan and the rendered files. `wgc compile` and the golden tests call it;
`wgc show --placement` calls `plan_model`, the same without rendering.
Paths are used as given (relative to the repository root in practice): they appear in banners
and provenance comments, so an absolute path is made relative to the working directory first.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from wgc.codegen.render import render
from wgc.diagnostics.diagnostic import Diagnostic, SourceMap
from wgc.driver import Driver
from wgc.ir.model import Model
from wgc.lower.lower import lower
from wgc.lower.params import needs_rebuild
from wgc.lower.plan import Plan, SourceFile
from wgc.placement.check import check_placement
from wgc.placement.params import apply_overrides


@dataclass
class CompileResult:
    walk_path: str
    placement_path: str
    diagnostics: list[Diagnostic]
    sources: SourceMap
    model: Model | None = None
    plan: Plan | None = None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def ok(self) -> bool:
        return self.plan is not None and not self.errors

    def default_output(self) -> str:
        """``generated/<model>/<placement stem>``."""
        assert self.plan is not None
        return os.path.join("generated", self.plan.model, Path(self.placement_path).stem)


def display_path(path: str) -> str:
    """``path`` as it should appear in generated files: relative, with forward slashes."""
    if os.path.isabs(path):
        path = os.path.relpath(path)
    return Path(os.path.normpath(path)).as_posix()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_model(
    walk_path: str,
    placement_path: str,
    sets: dict[str, str] | None = None,
    driver: Driver | None = None,
) -> CompileResult:
    """Everything `compile_model` does but rendering: the plan, or the first stage's errors."""
    walk_path, placement_path = display_path(walk_path), display_path(placement_path)
    driver = driver or Driver()
    fe = driver.front_end(walk_path)
    result = CompileResult(walk_path, placement_path, list(fe.diagnostics), fe.sources, fe.model)
    if fe.model is None or fe.errors:
        return result
    placed = check_placement(fe.model, placement_path)
    result.sources.add(placement_path, placed.text)
    result.diagnostics += placed.diagnostics
    if placed.placement is None or placed.errors:
        return result
    values, set_diags = apply_overrides(fe.model.params, placed.placement, dict(sets or {}))
    result.diagnostics += set_diags
    if any(d.is_error for d in set_diags):
        return result
    model = fe.model
    if needs_rebuild(model, values):
        # types, dims and loop bounds derive from params: build the IR again with the overrides
        again = driver.front_end(walk_path, fe.text, overrides=values)
        result.diagnostics += again.errors
        if again.model is None or again.errors:
            return result
        model = again.model
    result.model = model
    sources = (
        SourceFile(walk_path, _sha256(fe.text)),
        SourceFile(placement_path, _sha256(placed.text)),
    )
    result.plan = lower(model, placed.placement, values, sources)
    return result


def compile_model(
    walk_path: str,
    placement_path: str,
    sets: dict[str, str] | None = None,
    driver: Driver | None = None,
) -> CompileResult:
    result = plan_model(walk_path, placement_path, sets, driver)
    if result.plan is not None and result.model is not None:
        result.files = render(result.plan, result.model)
    return result
