"""`wgc show --format mermaid`: a Mermaid `flowchart LR` of the drawing model.

Walks, loops and `par`s are nested `subgraph`s; edge kinds map to Mermaid's arrow spellings
(`-->` solid, `-.->` dashed or dotted) and are coloured with `linkStyle` by index.
"""

from __future__ import annotations

import re

from wgc.show.graph import GNode, Graph
from wgc.show.style import style

_SHAPES = {
    "call": ("[", "]"),
    "input": ("([", "])"),
    "client": ("((", "))"),
    "persisted": ("[(", ")]"),
    "stream": ("{{", "}}"),
}

_CLASSES = {
    "call": "fill:#eef2ff,stroke:#4f46e5",
    "input": "fill:#f3f4f6,stroke:#6b7280",
    "client": "fill:#fee2e2,stroke:#dc2626",
    "persisted": "fill:#fef3c7,stroke:#92400e",
    "stream": "fill:#ccfbf1,stroke:#0d9488",
}


def ident(raw: str) -> str:
    """A Mermaid-safe identifier (ids come from source names, which are already `\\w+`)."""
    return re.sub(r"\W", "_", raw)


def text(s: str) -> str:
    """A quoted Mermaid label: `"` is not allowed inside, and `<br/>` breaks lines."""
    return '"' + s.replace("#", "#35;").replace('"', "#quot;").replace("\n", "<br/>") + '"'


def edge_lines(e, index: int) -> tuple[str, str]:
    """An edge's line and its `linkStyle` line (edge ``index``), styled by the edge's kind."""
    s = style(e.kind)
    arrow = "-->" if s.dash == "solid" else "-.->"
    label = f"|{text(e.label)}|" if e.label else ""
    dash = {"dashed": ",stroke-dasharray:6 4", "dotted": ",stroke-dasharray:2 3"}.get(s.dash, "")
    return (
        f"  {ident(e.src)} {arrow}{label} {ident(e.dst)}",
        f"  linkStyle {index} stroke:{s.color},color:{s.color}{dash}",
    )


def render_mermaid(g: Graph) -> str:
    out = ["flowchart LR"]
    for c in g.clusters:
        if c.parent is None:
            out += _cluster(g, c.id, 1)
    out += ["  " + _node(n) for n in g.nodes if n.cluster is None]
    link_styles = []
    for i, e in enumerate(g.edges):
        line, link_style = edge_lines(e, i)
        out.append(line)
        link_styles.append(link_style)
    out += link_styles
    out += [f"  classDef {k} {v}" for k, v in _CLASSES.items()]
    out += [
        "  classDef walk fill:#fafafa,stroke:#9ca3af",
        "  classDef loop fill:#fff7ed,stroke:#ea580c",
        "  classDef par fill:none,stroke:#6b7280,stroke-dasharray:5 4",
    ]
    for kind in ("walk", "loop", "par"):
        ids = [ident(c.id) for c in g.clusters if c.kind == kind]
        if ids:
            out.append(f"  class {','.join(ids)} {kind}")
    return "\n".join(out) + "\n"


def _cluster(g: Graph, cid: str, depth: int) -> list[str]:
    pad = "  " * depth
    c = next(x for x in g.clusters if x.id == cid)
    out = [f"{pad}subgraph {ident(c.id)}[{text(c.label)}]", f"{pad}  direction LR"]
    for kind, mid in g.members[cid]:
        if kind == "node":
            out.append(f"{pad}  {_node(g.node(mid))}")
        else:
            out += _cluster(g, mid, depth + 1)
    out.append(f"{pad}end")
    return out


def _node(n: GNode) -> str:
    left, right = _SHAPES[n.kind]
    label = n.label + (f"\n{n.sub}" if n.sub else "")
    return f"{ident(n.id)}{left}{text(label)}{right}:::{n.kind}"
