"""`wgc show --format html`: one self-contained page that draws every walk.

No network, no scripts from elsewhere: the layout (`wgc.show.layout`) is computed here and drawn
as inline SVG; the page (`page.html.j2`) adds a sidebar with the walks, streams, flows and a
legend of edge kinds. Every shape carries a hover title with the details (ports, types, the
resolved edges it stands for).
"""

from __future__ import annotations

import math
from html import escape
from importlib import resources

import jinja2
import markupsafe  # jinja2's own dependency: `Markup` marks the SVG as safe

from wgc.ir.model import Model
from wgc.show import describe as d
from wgc.show.graph import GEdge, GNode, Graph, build_graph
from wgc.show.layout import BACK_LANE, Box, Layout, layout, loop_of_back_edge
from wgc.show.style import EDGE_STYLES, style
from wgc.show.text import flow_lines

_DASH = {"solid": "", "dashed": "7 4", "dotted": "2 3"}


def render_html(model: Model, walk: str | None = None) -> str:
    g = build_graph(model, walk)
    lay = layout(g)
    env = jinja2.Environment(autoescape=True, keep_trailing_newline=True)
    template = env.from_string(
        resources.files("wgc.show").joinpath("page.html.j2").read_text(encoding="utf-8")
    )
    return template.render(
        model=model,
        file=model.file,
        walks=[c for c in g.clusters if c.kind == "walk"],
        streams=[
            (s.name, d.stream_header(s), d.policy_text(s.policy), s.final.value)
            for s in model.streams
        ],
        flows=["\n".join(flow_lines(f)) for f in model.flows] if walk is None else [],
        legend=[(k, s.color, _DASH[s.dash], s.legend) for k, s in EDGE_STYLES.items()],
        svg=markupsafe.Markup(svg(g, lay)),
    )


def svg(g: Graph, lay: Layout) -> str:
    w, h = math.ceil(lay.width), math.ceil(lay.height)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family="system-ui, -apple-system, Segoe UI, sans-serif">',
        _markers(),
    ]
    for c in g.clusters:
        out.append(_cluster(c, lay.clusters[c.id]))
    bodies, labels = _edges(g, lay)
    out += bodies
    out += [_node(n, lay.nodes[n.id]) for n in g.nodes]
    out += labels  # last: always readable over shapes
    out.append("</svg>")
    return "\n".join(out)


def _n(v: float) -> str:
    """Coordinates rounded to one decimal, so the output does not depend on float noise."""
    return f"{round(v, 1):g}"


def _markers() -> str:
    parts = ["<defs>"]
    for kind, s in EDGE_STYLES.items():
        parts.append(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{s.color}"/></marker>'
        )
    parts.append("</defs>")
    return "".join(parts)


def _cluster(c, b: Box) -> str:
    cls = f"cluster {c.kind}"
    anchor = f' id="walk-{escape(c.walk)}"' if c.kind == "walk" else ""
    size = 13 if c.kind == "walk" else 11
    weight = "600" if c.kind == "walk" else "500"
    return (
        f'<g class="{cls}"{anchor}><title>{escape(c.label)}</title>'
        f'<rect x="{_n(b.x)}" y="{_n(b.y)}" width="{_n(b.w)}" height="{_n(b.h)}" rx="10"/>'
        f'<text x="{_n(b.x + 12)}" y="{_n(b.y + (19 if c.kind == "walk" else 16))}" '
        f'font-size="{size}" font-weight="{weight}">{escape(c.label)}</text></g>'
    )


def _node(n: GNode, b: Box) -> str:
    x, y, w, h = _n(b.x), _n(b.y), _n(b.w), _n(b.h)
    if n.kind == "input" or n.kind == "client":
        shape = f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="{_n(b.h / 2)}"/>'
    elif n.kind == "persisted":
        ry = 6
        shape = (
            f'<path d="M{x},{_n(b.y + ry)} a{_n(b.w / 2)},{ry} 0 0,0 {w},0 '
            f"v{_n(b.h - 2 * ry)} a{_n(b.w / 2)},{ry} 0 0,1 -{w},0 z "
            f'M{x},{_n(b.y + ry)} a{_n(b.w / 2)},{ry} 0 0,1 {w},0"/>'
        )
    elif n.kind == "stream":
        k = 10
        pts = [
            (b.x + k, b.y),
            (b.x + b.w - k, b.y),
            (b.x + b.w, b.cy),
            (b.x + b.w - k, b.y + b.h),
            (b.x + k, b.y + b.h),
            (b.x, b.cy),
        ]
        shape = '<polygon points="' + " ".join(f"{_n(px)},{_n(py)}" for px, py in pts) + '"/>'
    else:
        shape = f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6"/>'
    main_size = 13 if n.kind == "call" else 11
    if n.sub:
        t1 = b.cy - 2
        text = (
            f'<text x="{_n(b.cx)}" y="{_n(t1)}" class="main" font-size="{main_size}">'
            f"{escape(n.label)}</text>"
            f'<text x="{_n(b.cx)}" y="{_n(t1 + 13)}" class="sub" font-size="10">'
            f"{escape(n.sub)}</text>"
        )
    else:
        text = (
            f'<text x="{_n(b.cx)}" y="{_n(b.cy + 4)}" class="main" font-size="{main_size}">'
            f"{escape(n.label)}</text>"
        )
    return f'<g class="node {n.kind}"><title>{escape(n.title)}</title>{shape}{text}</g>'


def _route_kind(e: GEdge, g: Graph, lay: Layout) -> str:
    """``back`` (a loop lane), ``down`` (stream junction into a call's top), ``fwd``, ``under``."""
    if style(e.kind).back and loop_of_back_edge(g, lay, e.src, e.label) is not None:
        return "back"
    if g.node(e.src).cluster is None and g.node(e.dst).cluster is not None:
        return "down"
    if lay.nodes[e.dst].cx <= lay.nodes[e.src].cx - 1 or e.src == e.dst:
        return "under"
    return "fwd"


def _ports(g: Graph, lay: Layout, kinds: list[str]) -> dict[tuple[int, str], float]:
    """Where each edge leaves (right side) and enters (left side) a box: spread along the side,
    ordered by the other end's height, so parallel edges do not share one point."""
    ins: dict[str, list[tuple[int, float, int]]] = {}
    outs: dict[str, list[tuple[float, int]]] = {}
    for i, (e, k) in enumerate(zip(g.edges, kinds, strict=True)):
        if k in ("fwd", "back"):
            ins.setdefault(e.dst, []).append((k == "back", lay.nodes[e.src].cy, i))
        if k == "fwd":
            outs.setdefault(e.src, []).append((lay.nodes[e.dst].cy, i))
    at: dict[tuple[int, str], float] = {}
    for nid, items in ins.items():
        b = lay.nodes[nid]
        for j, (_, _, i) in enumerate(sorted(items)):
            at[(i, "in")] = b.y + b.h * (j + 1) / (len(items) + 1)
    for nid, outs_ in outs.items():
        b = lay.nodes[nid]
        for j, (_, i) in enumerate(sorted(outs_)):
            at[(i, "out")] = b.y + b.h * (j + 1) / (len(outs_) + 1)
    return at


def _edges(g: Graph, lay: Layout) -> tuple[list[str], list[str]]:
    kinds = [_route_kind(e, g, lay) for e in g.edges]
    ports = _ports(g, lay, kinds)
    # a fan-out of one channel (`context` into four calls) is labelled once, near its source
    fan: dict[tuple[str, str, str], int] = {}
    for e in g.edges:
        fan[(e.src, e.kind, e.label)] = fan.get((e.src, e.kind, e.label), 0) + 1
    bodies, labels, labelled = [], [], set()
    for i, (e, k) in enumerate(zip(g.edges, kinds, strict=True)):
        a, b = lay.nodes[e.src], lay.nodes[e.dst]
        y_out, y_in = ports.get((i, "out"), a.cy), ports.get((i, "in"), b.cy)
        if k == "back":
            path, pos = _back(e, a, b, y_in, g, lay)
        else:
            to_hub = g.node(e.dst).cluster is None
            t = (
                0.2
                if to_hub
                else 0.8
                if k == "down"
                else 0.3
                if fan[(e.src, e.kind, e.label)] > 1
                else 0.5
            )
            path, pos = _route(k, a, b, y_out, y_in, t)
        key = (e.src, e.kind, e.label)
        if key in labelled:
            pos = None
        labelled.add(key)
        body, label = _edge(e, path, pos)
        bodies.append(body)
        if label:
            labels.append(label)
    return bodies, labels


def _edge(e: GEdge, path: str, pos: tuple[float, float] | None) -> tuple[str, str]:
    s = style(e.kind)
    dash = f' stroke-dasharray="{_DASH[s.dash]}"' if _DASH[s.dash] else ""
    body = (
        f'<g class="edge {e.kind}"><title>{escape(e.title)}</title>'
        f'<path d="{path}" stroke="{s.color}"{dash} marker-end="url(#arrow-{e.kind})"/>'
        f'<path d="{path}" class="hit"/></g>'
    )
    label = ""
    if e.label and pos is not None:
        anchor = ' text-anchor="start"' if s.back else ""
        label = (
            f'<text class="elabel"{anchor} x="{_n(pos[0])}" y="{_n(pos[1])}" fill="{s.color}">'
            f"<title>{escape(e.title)}</title>{escape(e.label)}</text>"
        )
    return body, label


def _back(e: GEdge, a: Box, b: Box, y_in: float, g: Graph, lay: Layout):
    """A loop-carried edge: down from the source into the loop's lane, left along it, then up
    and into the target's left side."""
    found = loop_of_back_edge(g, lay, e.src, e.label)
    assert found is not None
    loop, lane = found
    lb = lay.clusters[loop]
    lane_y = lb.y + lb.h - BACK_LANE * (len(lay.back[loop]) - lane) + 2
    branch_x = b.x - 9 - 4 * lane
    pts = [(a.cx, a.y + a.h), (a.cx, lane_y), (branch_x, lane_y), (branch_x, y_in), (b.x, y_in)]
    # the label starts just right of the trunk, where the lane has no line
    return _rounded(pts, 6), (a.cx + 6, lane_y + 3.5)


def _rounded(pts: list[tuple[float, float]], r: float) -> str:
    """A polyline with its corners rounded by radius ``r`` (quadratic curves)."""
    out = [f"M{_n(pts[0][0])},{_n(pts[0][1])}"]
    for (x0, y0), (x1, y1), (x2, y2) in zip(pts, pts[1:], pts[2:], strict=False):
        d1 = max(abs(x1 - x0) + abs(y1 - y0), 1e-9)
        d2 = max(abs(x2 - x1) + abs(y2 - y1), 1e-9)
        k1, k2 = min(r, d1 / 2) / d1, min(r, d2 / 2) / d2
        ax, ay = x1 - (x1 - x0) * k1, y1 - (y1 - y0) * k1
        bx, by = x1 + (x2 - x1) * k2, y1 + (y2 - y1) * k2
        out.append(f"L{_n(ax)},{_n(ay)} Q{_n(x1)},{_n(y1)} {_n(bx)},{_n(by)}")
    out.append(f"L{_n(pts[-1][0])},{_n(pts[-1][1])}")
    return " ".join(out)


def _route(kind: str, a: Box, b: Box, y_out: float, y_in: float, t: float = 0.5):
    """A cubic path from ``a`` to ``b`` and where its label goes."""
    if kind == "down":  # stream junction -> consumer: into the consumer's top
        p0, p3 = (a.x, a.cy), (b.cx, b.y)
        c1, c2 = (a.x - 90, a.cy), (b.cx, b.y - 70)
    elif kind == "under":  # backwards outside a loop lane: under both nodes
        p0, p3 = (a.cx, a.y + a.h), (b.cx, b.y + b.h + 2)
        low = max(a.y + a.h, b.y + b.h) + 26 + min(abs(a.cx - b.cx) * 0.08, 20)
        c1, c2 = (a.cx, low), (b.cx, low)
    else:  # forwards: right side to left side
        p0, p3 = (a.x + a.w, y_out), (b.x, y_in)
        bend = max((p3[0] - p0[0]) * 0.45, 30)
        c1, c2 = (p0[0] + bend, p0[1]), (p3[0] - bend, p3[1])
    path = (
        f"M{_n(p0[0])},{_n(p0[1])} C{_n(c1[0])},{_n(c1[1])} "
        f"{_n(c2[0])},{_n(c2[1])} {_n(p3[0])},{_n(p3[1])}"
    )
    # the label sits on the curve at parameter t, nudged above the line
    u = 1 - t
    w0, w1, w2, w3 = u**3, 3 * u * u * t, 3 * u * t * t, t**3
    mx = w0 * p0[0] + w1 * c1[0] + w2 * c2[0] + w3 * p3[0]
    my = w0 * p0[1] + w1 * c1[1] + w2 * c2[1] + w3 * p3[1]
    return path, (mx, my - 4)
