"""Semantic tokens: every indexed name and open word, coloured by what it resolves to.

The legend uses the protocol's standard token types, so every theme colours them without
configuration: nodes are classes, ports properties, channels variables, walks and subflows
functions, flows namespaces, streams events, params and options parameters (`readonly` marks
params), types types, dtypes and policies keywords-like `enumMember`s, modalities enum members.
A token at its declaration carries the `declaration` modifier.
"""

from __future__ import annotations

from lsprotocol import types as lsp

from wgc.lsp.document import Document

TOKEN_TYPES = [
    "class",
    "property",
    "variable",
    "function",
    "namespace",
    "event",
    "parameter",
    "type",
    "enumMember",
    "label",
]
TOKEN_MODIFIERS = ["declaration", "readonly"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS)

_BY_KIND = {
    "model": "namespace",
    "node": "class",
    "port": "property",
    "channel": "variable",
    "var": "variable",
    "loop": "label",
    "walk": "function",
    "subflow": "function",
    "flow": "namespace",
    "stream": "event",
    "param": "parameter",
    "option": "parameter",
    "type": "type",
}
_BY_ROLE = {
    "dtype": "type",
    "modality": "enumMember",
    "policy": "enumMember",
    "property": "property",
    "label": "label",
    "builtin": "variable",
}


def semantic_tokens(doc: Document) -> list[int]:
    """The protocol's relative encoding of every token of ``doc`` (one token per position:
    a binding written as one name is a port for colouring)."""
    rows: dict[tuple[int, int], tuple[int, int, int]] = {}
    for w in doc.words:
        rows[(w.line, w.start)] = (w.end - w.start, TOKEN_TYPES.index(_BY_ROLE[w.role]), 0)
    for o in doc.occurrences:
        if (o.line, o.start) in rows and o.pair:
            continue
        mods = (1 if o.is_def else 0) | (2 if o.symbol.kind == "param" else 0)
        kind = TOKEN_TYPES.index(_BY_KIND[o.symbol.kind])
        rows[(o.line, o.start)] = (o.end - o.start, kind, mods)
    data: list[int] = []
    prev_line = prev_col = 0
    for (line, col), (length, kind, mods) in sorted(rows.items()):
        delta_col = col - prev_col if line == prev_line else col
        data += [line - prev_line, delta_col, length, kind, mods]
        prev_line, prev_col = line, col
    return data
