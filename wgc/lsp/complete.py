"""Completion: names, keywords, modalities, dtypes and policies in `.walk` files; keys, node,
walk and param names in placement files.

After `NODE.` only that node's ports are offered and after `option.` only options; elsewhere
every declared name and every word the language knows. Placement keys come from the loader's
own key tables (`wgc.placement.load`), so completion never offers a key the loader rejects.
"""

from __future__ import annotations

import re

from lsprotocol import types as lsp

from wgc.ir.decls import POLICY_PARAMS, FinalMode
from wgc.ir.flow import MODALITIES
from wgc.ir.types import DTYPE_NAMES
from wgc.lsp.document import Document
from wgc.lsp.placement_refs import placement_keys

KEYWORDS = (
    "model", "param", "type", "option", "node", "stream", "walk", "flow", "subflow",
    "stateless", "kv_cache", "like", "impl", "in", "out", "label", "config", "reads",
    "chunk", "final", "after_done", "par", "loop", "max", "until", "eager", "nospeculate",
    "yield", "last", "all", "emit", "as", "persist", "when", "on", "for", "match", "if", "else",
    "repeat", "fail", "and", "or", "not", "placed", "request", "true", "false",
)  # fmt: skip
_KIND = {
    "node": lsp.CompletionItemKind.Class,
    "port": lsp.CompletionItemKind.Field,
    "stream": lsp.CompletionItemKind.Event,
    "walk": lsp.CompletionItemKind.Function,
    "flow": lsp.CompletionItemKind.Module,
    "subflow": lsp.CompletionItemKind.Function,
    "param": lsp.CompletionItemKind.Constant,
    "type": lsp.CompletionItemKind.TypeParameter,
    "option": lsp.CompletionItemKind.Property,
    "channel": lsp.CompletionItemKind.Variable,
}
_DOTTED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.[A-Za-z0-9_]*$")


def complete_walk(doc: Document, line: int, col: int) -> list[lsp.CompletionItem]:
    before = doc.lines[line][:col] if line < len(doc.lines) else ""
    doc = doc.names_source  # while the text does not parse, the names of the last that did
    m = _DOTTED.search(before)
    if m is not None:
        owner = m.group(1)
        if owner == "option":
            return _names(doc, {"option"})
        if doc.model is not None and doc.model.node(owner) is not None:
            node = doc.model.node(owner)
            assert node is not None
            return [_item(p.name, "port", str(p.type)) for p in (*node.inputs, *node.outputs)]
        return [_item(m, "modality") for m in MODALITIES]
    items = _names(doc, set(_KIND))
    items += [_item(k, "keyword") for k in KEYWORDS]
    items += [_item(m, "modality") for m in MODALITIES]
    items += [_item(d, "dtype") for d in DTYPE_NAMES]
    items += [_item(p.value, "policy") for p in POLICY_PARAMS]
    items += [_item(f.value, "final mode") for f in FinalMode]
    return items


def _names(doc: Document, kinds: set[str]) -> list[lsp.CompletionItem]:
    seen: dict[tuple[str, str], lsp.CompletionItem] = {}
    for o in doc.occurrences:
        if o.symbol.kind in kinds and o.symbol.kind != "port":
            seen.setdefault((o.symbol.kind, o.symbol.name), _item(o.symbol.name, o.symbol.kind))
    return list(seen.values())


def _item(label: str, kind: str, detail: str | None = None) -> lsp.CompletionItem:
    return lsp.CompletionItem(
        label=label,
        kind=_KIND.get(kind, lsp.CompletionItemKind.Keyword),
        detail=detail or kind,
    )


def complete_placement(doc: Document, line: int, col: int) -> list[lsp.CompletionItem]:
    """Keys at a key position (by the indentation of the keys above), names inside `nodes:`,
    `walks:` and `params:`."""
    before = doc.lines[line][:col] if line < len(doc.lines) else ""
    model = doc.model
    key_here = re.match(r"^\s*(?:-\s*)?([A-Za-z_]*)$", before)
    inline = re.search(r"\b(nodes|walks|node_names|graph_walks)\s*:\s*\[?[^\]]*$", before)
    if inline is not None and model is not None:
        if inline.group(1) in ("nodes", "node_names"):
            return [_item(n.name, "node") for n in model.nodes]
        return [_item(w.name, "walk") for w in model.walks]
    path = _key_path(doc.lines, line, len(before) - len(before.lstrip(" -")))
    if key_here is not None and before.lstrip().startswith("-") and model is not None:
        # an item of a block list: `nodes:` / `walks:` on the lines above
        if path[-1:] in (["nodes"], ["node_names"]):
            return [_item(n.name, "node") for n in model.nodes]
        if path[-1:] in (["walks"], ["graph_walks"]):
            return [_item(w.name, "walk") for w in model.walks]
    if key_here is not None and path[-1:] == ["params"] and model is not None:
        return [_item(p.name, "param", repr(p.value)) for p in model.params]
    if key_here is not None:
        return [_item(k, "property") for k in placement_keys(path)]
    return []


def _key_path(lines: list[str], line: int, indent: int) -> list[str]:
    """The keys of the mappings enclosing a key written at ``indent`` on ``line``."""
    path: list[str] = []
    for text in reversed(lines[:line]):
        stripped = text.lstrip(" -")
        if not stripped or stripped.startswith("#"):
            continue
        own = len(text) - len(stripped)
        m = re.match(r"([A-Za-z_]+)\s*:\s*(#.*)?$", stripped)
        if own < indent and m is not None:
            path.insert(0, m.group(1))
            indent = own
        elif own < indent:
            indent = own
    return path
