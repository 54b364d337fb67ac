"""One analysed version of an open file: what every feature of the server reads.

A `.walk` file goes through the compiler's own front end (`Driver.front_end`, with an
`IncrementalParser`), so its diagnostics are `wgc check`'s; the parse tree the driver used is
kept for the name index. A placement file is checked as `wgc check` checks it: against the model
its folder pairs it with (`placements/` beside one `.walk` file), that model read from the
editor's buffer when it is open there, else from disk.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lark import Tree

from wgc.cli.check import is_placement, paired_model
from wgc.diagnostics.diagnostic import Diagnostic, source_lines
from wgc.driver import Driver, FrontEndResult
from wgc.ir.model import Model
from wgc.lsp.incremental import IncrementalParser
from wgc.lsp.names import Occurrence, Symbol, Word, index
from wgc.parse.parser import Parser


class EditorDriver(Driver):
    """The compiler's driver with an `IncrementalParser`, which also keeps the last tree."""

    def __init__(self) -> None:
        super().__init__()
        self.incremental = IncrementalParser()

    @property
    def parser(self) -> Parser:
        return self.incremental


@dataclass
class Document:
    path: str
    text: str
    diagnostics: list[Diagnostic]
    model: Model | None = None  # a `.walk` file's model (also with errors), or a placement's
    model_path: str | None = None  # a placement's model
    tree: Tree | None = None
    occurrences: list[Occurrence] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    # the last version that parsed, while this one does not (completion reads its names)
    last_good: Document | None = None

    @property
    def names_source(self) -> Document:
        """This version, or while it does not parse the last version that did."""
        return self if self.tree is not None or self.last_good is None else self.last_good

    @property
    def is_placement(self) -> bool:
        return is_placement(self.path)

    def at(self, line: int, col: int) -> list[Occurrence]:
        """The occurrences under a 0-based position (two for a binding written as one name)."""
        keys = [(o.line, o.start) for o in self.occurrences]
        i = bisect.bisect_right(keys, (line, col))
        hits = []
        for o in self.occurrences[max(i - 2, 0) : i + 1]:
            if o.contains(line, col):
                hits.append(o)
        return hits

    def of(self, symbol: Symbol) -> list[Occurrence]:
        return [o for o in self.occurrences if o.symbol == symbol]

    def definition(self, symbol: Symbol) -> Occurrence | None:
        """Where ``symbol`` is declared: its declaring occurrence, else (a channel only bound
        by a flow argument) its first one."""
        found = self.of(symbol)
        return next((o for o in found if o.is_def), found[0] if found else None)


def analyse_walk(driver: EditorDriver, path: str, text: str) -> Document:
    result: FrontEndResult = driver.front_end(path, text)
    parsed = driver.incremental.last
    doc = Document(path, text, list(result.diagnostics), result.model, lines=source_lines(text))
    if parsed is not None and parsed.tree is not None:
        doc.tree = parsed.tree
        doc.occurrences, doc.words = index(parsed.tree)
    return doc


def analyse_placement(
    driver: EditorDriver, path: str, text: str, buffer: Callable[[str], str | None]
) -> Document:
    """``path`` checked against its paired model; ``buffer(path)`` is an open file's text."""
    from wgc.placement.check import check_placement

    model_path = paired_model(path)
    model = None
    diags: list[Diagnostic] = []
    if model_path is not None:
        model_text = buffer(model_path)
        if model_text is None:
            model_text = Path(model_path).read_text(encoding="utf-8", errors="replace")
        front = driver.front_end(model_path, model_text)
        if front.errors:
            diags += front.errors  # shown at the top of the placement: its rules did not run
        else:
            model = front.model
    placed = check_placement(model, path, text)
    diags += placed.diagnostics
    return Document(path, text, diags, model, model_path, lines=source_lines(text))
