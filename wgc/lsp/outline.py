"""The outline of a `.walk` file (document symbols): its declarations in source order, a node's
ports and a walk's inputs under it, from the IR's spans."""

from __future__ import annotations

from lsprotocol import types as lsp

from wgc.diagnostics.diagnostic import Span
from wgc.ir.model import Model
from wgc.lsp.convert import to_range

K = lsp.SymbolKind


def _symbol(name: str, kind: lsp.SymbolKind, span: Span, name_span: Span | None, detail: str = "",
            children: list[lsp.DocumentSymbol] | None = None) -> lsp.DocumentSymbol:  # fmt: skip
    whole = to_range(span)
    return lsp.DocumentSymbol(
        name=name,
        kind=kind,
        range=whole,
        selection_range=to_range(name_span) if name_span is not None else whole,
        detail=detail or None,
        children=children or None,
    )


def outline(model: Model) -> list[lsp.DocumentSymbol]:
    out = []
    out += [_symbol(p.name, K.Constant, p.span, p.name_span, repr(p.value)) for p in model.params]
    out += [_symbol(t.name, K.TypeParameter, t.span, t.name_span, str(t.type)) for t in model.types]
    out += [_symbol(o.name, K.Property, o.span, o.name_span, o.type) for o in model.options]
    for n in model.nodes:
        ports = [
            _symbol(p.name, K.Field, p.span, None, f"{p.direction.value} {p.type}")
            for p in (*n.inputs, *n.outputs)
        ]
        out.append(_symbol(n.name, K.Class, n.span, n.name_span, n.engine.value, ports))
    out += [
        _symbol(s.name, K.Event, s.span, s.name_span, f"{s.producer} -> {s.consumer}")
        for s in model.streams
    ]
    for w in model.walks:
        inputs = [_symbol(i.name, K.Variable, i.span, None, str(i.type)) for i in w.inputs]
        out.append(_symbol(w.name, K.Function, w.span, w.name_span, "walk", inputs))
    out += [_symbol(s.name, K.Function, s.span, s.name_span, "subflow") for s in model.subflows]
    out += [_symbol(f.name, K.Module, f.span, f.name_span, "flow") for f in model.flows]
    return sorted(out, key=lambda s: (s.range.start.line, s.range.start.character))
