"""The front-end driver: read a file, parse, build the IR, run the verifier pipeline.

`front_end(path)` is what `wgc check`, `show` and `fmt` call. One `Parser` is made per
`Driver` (the grammar is compiled once) and reused for every file it reads.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Diagnostic, SourceMap, Span, diag
from wgc.ir.build import build
from wgc.ir.model import Model
from wgc.parse.parser import Comment, Parser
from wgc.passes import PIPELINE


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


class Driver:
    """Runs the front end over many files, reusing one parser."""

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


_SHARED: Driver | None = None


def front_end(path: str, text: str | None = None, stop_after: str | None = None) -> FrontEndResult:
    """The front end of one file, with one driver shared by every call in this process.

    Compiling the grammar costs more than checking a typical file, so `wgc check` on a folder
    must not pay for it once per file.
    """
    global _SHARED
    if _SHARED is None:
        _SHARED = Driver()
    return _SHARED.front_end(path, text, stop_after=stop_after)
