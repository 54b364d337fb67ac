"""`wgc show --format dot`: Graphviz source of the drawing model (`wgc.show.graph`).

One `cluster_` subgraph per walk, nested ones per loop (labelled with the bound) and per `par`
(dashed). Loop-carried edges do not constrain the ranking, so they curve back; the rest of the
styling comes from `wgc.show.style`. Render with ``dot -Tsvg``.
"""

from __future__ import annotations

from wgc.show.graph import GNode, Graph
from wgc.show.style import style

_NODE_SHAPES = {
    "call": 'shape=box, style="rounded,filled", fillcolor="#eef2ff", color="#4f46e5"',
    "input": 'shape=ellipse, style=filled, fillcolor="#f3f4f6", color="#6b7280", fontsize=9',
    "client": 'shape=doublecircle, style=filled, fillcolor="#fee2e2", color="#dc2626"',
    "persisted": 'shape=cylinder, style=filled, fillcolor="#fef3c7", color="#92400e"',
    "stream": 'shape=cds, style=filled, fillcolor="#ccfbf1", color="#0d9488", fontsize=9',
}

_CLUSTER_STYLES = {
    "walk": 'style="rounded,filled"; fillcolor="#fafafa"; color="#9ca3af"; fontsize=12',
    "loop": 'style="rounded,filled"; fillcolor="#fff7ed"; color="#ea580c"; fontsize=10',
    "par": 'style="dashed,rounded"; color="#6b7280"; fontsize=9',
}


def q(text: str) -> str:
    """A DOT double-quoted string; newlines become centred line breaks."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(g: Graph) -> str:
    out = [
        f"digraph {q(g.model)} {{",
        '  graph [rankdir=LR, compound=true, newrank=true, fontname="Helvetica", nodesep=0.3];',
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9, arrowsize=0.7];',
    ]
    for c in g.clusters:
        if c.parent is None:
            out += _cluster(g, c.id, 1)
    out += [f"  {_node(n)}" for n in g.nodes if n.cluster is None]
    out += [f"  {_edge(e)}" for e in g.edges]
    out.append("}")
    return "\n".join(out) + "\n"


def _cluster(g: Graph, cid: str, depth: int) -> list[str]:
    pad = "  " * depth
    c = next(x for x in g.clusters if x.id == cid)
    out = [
        f"{pad}subgraph {q('cluster_' + c.id)} {{",
        f"{pad}  label={q(c.label)}; {_CLUSTER_STYLES[c.kind]};",
    ]
    for kind, mid in g.members[cid]:
        if kind == "node":
            out.append(f"{pad}  {_node(g.node(mid))}")
        else:
            out += _cluster(g, mid, depth + 1)
    out.append(f"{pad}}}")
    return out


def _node(n: GNode) -> str:
    label = n.label + (f"\n{n.sub}" if n.sub else "")
    return f"{q(n.id)} [label={q(label)}, tooltip={q(n.title)}, {_NODE_SHAPES[n.kind]}];"


def _edge(e) -> str:
    s = style(e.kind)
    attrs = [f"color={q(s.color)}", f"fontcolor={q(s.color)}", f"tooltip={q(e.title)}"]
    if e.label:
        attrs.append(f"label={q(e.label)}")
    if s.dash != "solid":
        attrs.append(f"style={s.dash}")
    if s.back:
        attrs.append("constraint=false")
    return f"{q(e.src)} -> {q(e.dst)} [{', '.join(attrs)}];"
