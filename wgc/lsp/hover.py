"""Hover: what the compiler knows of the name under the cursor, as Markdown.

Types come from the IR (a port's resolved type, the types a channel's edges carry, a stream's
chunk as its consumer port declares it), the description from the comments written above the
declaration (and after it on its line), and for a node the docstring of its `impl` class.
"""

from __future__ import annotations

from wgc.ir.decls import POLICY_PARAMS
from wgc.ir.model import Model
from wgc.lsp.document import Document
from wgc.lsp.impl import find_class
from wgc.lsp.names import Occurrence, Symbol


def hover_text(doc: Document, occ: Occurrence) -> str | None:
    model = doc.model
    if model is None:
        return None
    sym = occ.symbol
    head = signature(model, sym)
    if head is None:
        return None
    parts = [f"```walk\n{head}\n```"]
    decl = doc.definition(sym)
    if decl is not None:
        comment = _comments(doc.lines, decl.line)
        if comment:
            parts.append(comment)
    if sym.kind == "node":
        node = model.node(sym.name)
        if node is not None and node.impl:
            cls = find_class(node.impl, doc.path)
            if cls is not None and cls.docstring:
                parts.append(f"`{node.impl}`\n\n{cls.docstring}")
    return "\n\n".join(parts)


def signature(model: Model, sym: Symbol) -> str | None:
    """The one-line summary of ``sym``; None when the model has no such symbol."""
    kind, name = sym.kind, sym.name
    if kind == "node":
        n = model.node(name)
        if n is None:
            return None
        ports = [f"  in  {p.name}: {p.type or p.type_ref}" for p in n.inputs]
        ports += [f"  out {p.name}: {p.type or p.type_ref}" for p in n.outputs]
        engine = f"like {n.like}" if n.like else n.engine.value
        return "\n".join([f"node {name}: {engine}", *ports])
    if kind == "port":
        n = model.node(sym.scope)
        port = n.port(name) if n is not None else None
        if n is None or port is None:
            return None
        written = f" (`{port.type_ref}`)" if port.type_ref else ""
        return f"{port.direction.value} {sym.scope}.{name}: {port.type}{written}"
    if kind == "channel":
        types = sorted(
            {str(e.type) for w in model.walks for e in w.edges if e.channel == name and e.type}
            | {str(i.type) for w in model.walks for i in w.inputs if i.name == name and i.type}
        )
        return f"channel {name}: {' | '.join(types) or '(type not known)'}"
    if kind == "stream":
        s = model.stream(name)
        if s is None:
            return None
        consumer = model.node(s.consumer.node)
        port = consumer.input(s.consumer.port) if consumer is not None else None
        chunk = port.type if port is not None else None
        args = ", ".join(f"{a} = {s.policy.get(a)}" for a in POLICY_PARAMS[s.policy.kind])
        return (
            f"stream {name}: {s.producer} -> {s.consumer}\n"
            f"  chunk {s.policy.kind.value}({args}), final {s.final.value}\n"
            f"  each chunk: {chunk}"
        )
    if kind == "option":
        o = model.option(name)
        if o is None:
            return None
        choices = f" in [{', '.join(repr(c) for c in o.choices)}]" if o.choices else ""
        by = f" (per `{o.default_by}`)" if o.default_by else ""
        return f"option {name}: {o.type}{choices} = {o.default!r}{by}"
    if kind == "param":
        p = model.param(name)
        return None if p is None else f"param {name} = {p.value!r}"
    if kind == "type":
        t = model.type(name)
        return None if t is None else f"type {name} = {t.type or t.ref}"
    if kind == "walk":
        w = model.walk(name)
        if w is None:
            return None
        args = ", ".join(f"{i.name}{'?' if i.optional else ''}: {i.type}" for i in w.inputs)
        return f"walk {name}({args})"
    if kind == "flow":
        f = model.flow(name)
        if f is None:
            return None
        trigger = f" on {f.on_stream}" if f.on_stream else (" when ..." if f.when else "")
        return f"flow {name}{trigger}"
    if kind == "subflow":
        s = model.subflow(name)
        return None if s is None else f"subflow {name}"
    if kind == "loop":
        return f"loop {name}"
    if kind == "var":
        return f"{name} (in `{sym.scope}`)"
    if kind == "model":
        return f"model {name}"
    return None


def _comments(lines: list[str], line: int) -> str:
    """The `#` comment block right above 0-based ``line`` and the comment ending it."""
    above = []
    i = line - 1
    while i >= 0 and lines[i].lstrip().startswith("#"):
        above.append(lines[i].lstrip()[1:].strip())
        i -= 1
    text = "\n".join(reversed(above))
    if 0 <= line < len(lines) and "#" in lines[line] and '"' not in lines[line]:
        trailing = lines[line].split("#", 1)[1].strip()
        text = f"{text}\n\n{trailing}" if text else trailing
    return text.strip()
