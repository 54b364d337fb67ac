"""The compile driver: the whole pipeline of one file, as one readable sequence.

    front end:  read -> parse -> build the IR -> the verifier passes      (`Driver.front_end`)
    back end:   placement rules -> param overrides (rebuild the IR when one changes a param)
                -> lower to a `Plan` -> render the generated files        (`Driver.compile`)

`wgc check`, `show` and `fmt` run the front end; `wgc compile`, `wgc run` and `wgc show
--placement` the whole compile (`Driver.plan` stops before rendering). Each stage stops at its
first errors and returns them with a `SourceMap` holding every file read, so YAML errors quote
their line. One `Parser` is made per `Driver` (the grammar is compiled once) and reused for every
file it reads: a command makes one driver and keeps it. Nothing is cached at module level.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wgc.diagnostics.diagnostic import Diagnostic, SourceMap, Span, diag
from wgc.ir.build import build
from wgc.ir.model import Model
from wgc.parse.parser import Comment, Parser
from wgc.passes import PIPELINE

if TYPE_CHECKING:
    from wgc.lower.plan import Plan


@dataclass
class FrontEndResult:
    path: str
    model: Model | None
    diagnostics: list[Diagnostic]
    sources: SourceMap
    comments: tuple[Comment, ...] = ()
    text: str = ""
    dumps: dict[str, Model] = field(default_factory=dict)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]


@dataclass
class CompileResult:
    """One (model, placement) compiled: the plan and the rendered files, or the diagnostics of
    the first stage that failed."""

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


class Driver:
    """Runs the pipeline over many files, reusing one parser."""

    def __init__(self) -> None:
        self._parser: Parser | None = None

    @property
    def parser(self) -> Parser:
        if self._parser is None:
            self._parser = Parser()
        return self._parser

    def read(self, path: str) -> tuple[str | None, Diagnostic | None]:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return None, diag(
                "WG010",
                f"cannot read `{path}`: {reason}",
                Span(path, 0, 0, 0, 0),
                help="check the path and that the file is UTF-8 text",
            )

    def front_end(
        self,
        path: str,
        text: str | None = None,
        verify: bool = True,
        overrides: dict | None = None,
        stop_after: str | None = None,
    ) -> FrontEndResult:
        """Parse, build and verify ``path``; ``overrides`` replaces param values (see `build`);
        ``stop_after`` names the last pass to run (`PASS_NAMES`; "build" runs none)."""
        with _gc_paused():
            return self._front_end(path, text, verify, overrides, stop_after)

    def _front_end(self, path, text, verify, overrides, stop_after) -> FrontEndResult:
        sources = SourceMap()
        if text is None:
            text, err = self.read(path)
            if err is not None:
                return FrontEndResult(path, None, [err], sources)
        assert text is not None
        sources.add(path, text)
        parsed = self.parser.parse(text, path)
        if parsed.tree is None:
            return FrontEndResult(path, None, list(parsed.diagnostics), sources, text=text)
        model, diags = build(parsed.tree, path, overrides)
        if verify and stop_after != "build":
            for p in PIPELINE:
                diags.extend(p.run(model))
                if stop_after == p.NAME:
                    break
        diags = sorted(_dedupe(diags), key=Diagnostic.sort_key)
        return FrontEndResult(path, model, diags, sources, parsed.comments, text)

    # ------------------------------------------------------------------ the whole compile
    def plan(
        self, walk_path: str, placement_path: str, sets: dict[str, str] | None = None
    ) -> CompileResult:
        """Everything `compile` does but rendering: the plan, or the first stage's errors.

        Paths appear in banners and provenance comments, so they are made relative to the
        working directory (`display_path`)."""
        # the back end is imported here: `wgc check` never loads lowering, codegen or jinja2
        from wgc.lower.lower import lower
        from wgc.lower.params import needs_rebuild
        from wgc.lower.plan import SourceFile
        from wgc.placement.check import check_placement
        from wgc.placement.params import apply_overrides

        walk_path, placement_path = display_path(walk_path), display_path(placement_path)
        fe = self.front_end(walk_path)
        result = CompileResult(walk_path, placement_path, list(fe.diagnostics), fe.sources)
        result.model = fe.model
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
            # types, dims and loop bounds derive from params: build the IR again with them
            again = self.front_end(walk_path, fe.text, overrides=values)
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

    def compile(
        self, walk_path: str, placement_path: str, sets: dict[str, str] | None = None
    ) -> CompileResult:
        """The plan and its generated files (`wgc.codegen.render`), or the errors."""
        from wgc.codegen.render import render

        with _fewer_collections():
            result = self.plan(walk_path, placement_path, sets)
            if result.plan is not None and not result.errors:
                result.files = render(result.plan)
        return result


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """The cyclic GC far less often while a compile runs: the IR and the plan are frozen trees
    (refcounting frees them) and a compile allocates millions of objects, so each collection
    walks an ever larger heap for nothing (11% of a 10,000-rank compile, growing with it). Not
    paused outright, as `_gc_paused` does for one file's IR: lowering and rendering make
    garbage, some of it cyclic."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], 50_000), before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def display_path(path: str) -> str:
    """``path`` as it should appear in generated files: relative, with forward slashes."""
    if os.path.isabs(path):
        path = os.path.relpath(path)
    return Path(os.path.normpath(path)).as_posix()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building one file's IR.

    Parsing allocates hundreds of thousands of small objects that all stay alive; every full
    collection walks all of them, which made a 10x larger model cost 17x the time. Nothing the
    front end builds is garbage until it returns, so collection is pointless until then.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    out = []
    for d in diags:
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


PASS_NAMES = ("build", *(p.NAME for p in PIPELINE))
