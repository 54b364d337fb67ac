"""Rename and find-references across a model and its placement files.

Inside the `.walk` file every occurrence of the symbol changes; a binding written as one name
(`N(x)`, `-> y`) names a port and a channel at once, so renaming one side spells the binding
out (`N(p = x)`) and the other keeps its name. A node, walk or param is also renamed where the
model's placement files name it (`wgc.lsp.placement_refs`), the placement text taken from the
editor when it is open there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types as lsp

from wgc.lsp.convert import uri_of
from wgc.lsp.document import Document
from wgc.lsp.names import Occurrence, Symbol
from wgc.lsp.placement_refs import names_in, placements_of

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PLACED_KINDS = ("node", "walk", "param")


def _range(line: int, start: int, end: int) -> lsp.Range:
    return lsp.Range(lsp.Position(line, start), lsp.Position(line, end))


def placement_locations(
    doc: Document, symbol: Symbol, buffer: Callable[[str], str | None]
) -> list[tuple[str, lsp.Range]]:
    """Where the model's placement files name ``symbol``: (path, range)."""
    if symbol.kind not in PLACED_KINDS or symbol.scope:
        return []
    out = []
    for path in placements_of(doc.path):
        text = buffer(path)
        if text is None:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        for n in names_in(text):
            if n.kind == symbol.kind and n.name == symbol.name:
                out.append((path, _range(n.line, n.start, n.end)))
    return out


def references(
    doc: Document, symbol: Symbol, buffer: Callable[[str], str | None], with_decl: bool = True
) -> list[lsp.Location]:
    uri = uri_of(doc.path)
    seen = set()
    out = []
    for o in doc.of(symbol):
        if (o.is_def and not with_decl) or (o.line, o.start) in seen:
            continue
        seen.add((o.line, o.start))
        out.append(lsp.Location(uri, _range(o.line, o.start, o.end)))
    out += [lsp.Location(uri_of(p), r) for p, r in placement_locations(doc, symbol, buffer)]
    return out


def rename_edits(
    doc: Document, symbol: Symbol, new: str, buffer: Callable[[str], str | None]
) -> lsp.WorkspaceEdit | None:
    """The edit renaming ``symbol`` to ``new``; None when ``new`` is not a name."""
    if not _NAME.fullmatch(new):
        return None
    edits: list[lsp.TextEdit] = [_edit(o, new) for o in doc.of(symbol)]
    changes = {uri_of(doc.path): edits}
    for path, rng in placement_locations(doc, symbol, buffer):
        changes.setdefault(uri_of(path), []).append(lsp.TextEdit(rng, new))
    return lsp.WorkspaceEdit(changes=changes)


def _edit(o: Occurrence, new: str) -> lsp.TextEdit:
    old = o.symbol.name
    # `a = b`: the first name renamed writes `new = a`, the second `a = new`
    text = {0: new, 1: f"{new} = {old}", 2: f"{old} = {new}"}[o.pair]
    return lsp.TextEdit(_range(o.line, o.start, o.end), text)
