"""A `Parser` that re-parses only the top-level declarations an edit touched.

An editor re-checks a file on every keystroke, and parsing is most of the front end's time. The
grammar is a sequence of top-level items (`start: _item*`) and every item begins with its keyword
at the start of a line in any file an editor holds, so the text is cut before each line that
starts with one of those keywords. Each piece is parsed alone, padded with the newlines that
precede it so that every token keeps its true line and column, and kept in a cache keyed by its
text and first line: an edit inside one node re-parses that node only.

Cutting is a guess (a line inside a block may begin with a word such as `node` at column 0), so
the pieces are trusted only when every one parses: the concatenation of item sequences is an
item sequence, and the LALR grammar gives it exactly one tree, the one a whole parse would
give. When any piece fails the whole text is parsed as one, so syntax errors read exactly as
`wgc check` reports them.
"""

from __future__ import annotations

import itertools
import re

from lark import Tree

from wgc.parse.parser import MAX_SOURCE_CHARS, Parser, ParseResult

_ITEM_START = re.compile(r"^(?:model|param|type|option|node|stream|walk|flow|subflow)\b", re.M)
_CACHE_LIMIT = 4096  # pieces kept; cleared whole when exceeded (a session's edits, many files)


def pieces(text: str) -> list[tuple[int, str]]:
    """``text`` cut before every line that starts a top-level item: (first line, piece)."""
    starts = [m.start() for m in _ITEM_START.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    bounds = [*starts, len(text)]
    out = []
    line = 1
    for a, b in itertools.pairwise(bounds):
        chunk = text[a:b]
        out.append((line, chunk))
        line += chunk.count("\n")
    return out


class IncrementalParser(Parser):
    """`Parser.parse` with the pieces of the last texts cached (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._pieces: dict[tuple[int, str], ParseResult] = {}
        self.reparsed = 0  # pieces parsed by the last `parse` (the benchmark reports it)
        self.last: ParseResult | None = None  # the last result: the driver keeps no tree

    def parse(self, text: str, file: str) -> ParseResult:
        self.last = self._parse(text, file)
        return self.last

    def _parse(self, text: str, file: str) -> ParseResult:
        self.reparsed = 0
        if len(text) > MAX_SOURCE_CHARS or "\r" in text:
            # `\r\n` files are rare in editors that send LSP text; the whole parse handles them
            return super().parse(text, file)
        results = []
        for line, chunk in pieces(text):
            result = self._pieces.get((line, chunk))
            if result is None:
                self.reparsed += 1
                result = super().parse("\n" * (line - 1) + chunk, file)
                if result.tree is None:
                    return super().parse(text, file)
                if len(self._pieces) >= _CACHE_LIMIT:
                    self._pieces.clear()
                self._pieces[(line, chunk)] = result
            results.append(result)
        children = [c for r in results if r.tree is not None for c in r.tree.children]
        comments = tuple(c for r in results for c in r.comments)
        return ParseResult(_start(children, text), comments, ())


def _start(children: list, text: str) -> Tree:
    """The `start` tree over ``children``, with the positions a whole parse propagates (the
    model's span is the first item's start to the last item's end)."""
    tree = Tree("start", children)
    if children:
        first, last = children[0].meta, children[-1].meta
        meta = tree.meta
        meta.empty = False
        meta.line, meta.column, meta.start_pos = first.line, first.column, first.start_pos
        meta.end_line, meta.end_column = last.end_line, last.end_column
        meta.end_pos = last.end_pos
    return tree
