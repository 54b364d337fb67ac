"""`wgc show --placement --format html`: the placed plan on one self-contained page.

The drawing is a grid: one column per rank, one row per walk, so the pieces of one walk sit side
by side on their ranks (BAGEL's three copies of `denoise` on one line). Each piece is laid out by
the IR view's layered layout (`wgc.show.layout`) and drawn by its shapes and edge routes
(`wgc.show.html`); only the grid and the cross-rank hops are drawn here. A hop leaves the bottom
of its producer, runs along its own lane under the row (one lane per producer and channels, so
`combine_cfg` sending `latents, time_index` to ranks 1 and 2 is one trunk with two branches),
and rises into the bottom of each consumer; lanes are highlighted and labelled with the bytes of
one hop. The sidebar lists the ranks (nodes, memory estimate) and the transfers per walk.
"""

from __future__ import annotations

import math
from html import escape
from importlib import resources

import jinja2
import markupsafe  # jinja2's own dependency: `Markup` marks the SVG as safe

from wgc.lower.plan import Plan
from wgc.lower.summary import cross_rank_summary
from wgc.show import html as H
from wgc.show.graph import GNode, Graph
from wgc.show.layout import MARGIN, Box, Layout, _Layouter, node_size, text_width
from wgc.show.plan_graph import HIGHLIGHT, CrossEdge, PlanGraph, build_plan_graph
from wgc.show.plan_text import (
    PlanIndex,
    human_bytes,
    request_total,
    restart_rows,
    restart_text,
    total_text,
)
from wgc.show.style import EDGE_STYLES, style

RANK_HEAD = 46  # rank name and device line
RANK_PAD = 14
RANK_GAP = 90  # between rank columns
ROW_GAP = 22
LANE = 16  # one cross-rank lane under a row
LANE_PAD = 12
HUB_GAP = 120  # between a rank's pieces and its hubs (client, persisted, streams)
MIN_COL = 150


class _Grid:
    """Positions of rank columns and walk rows, then of every piece and hub inside them."""

    def __init__(self, pg: PlanGraph) -> None:
        self.pg = pg
        self.g: Graph = pg.graph
        self.lay = _Layouter(self.g)
        self.lanes = _lanes(pg)
        self.rank_boxes: dict[int, Box] = {}
        self.lane_y: dict[int, float] = {}  # lane index -> y

    def hubs(self, r: int) -> list[GNode]:
        return [n for n in self.g.nodes if n.cluster is None and self.pg.hub_ranks.get(n.id) == r]

    def place(self) -> Layout:
        ranks = [ri.rank for ri in self.pg.ranks]
        piece_w, hub_w, col_w = {}, {}, {}
        for ri in self.pg.ranks:
            widths = [self.lay.size(p)[0] for (w, r), p in self.pg.pieces.items() if r == ri.rank]
            piece_w[ri.rank] = max([0.0, *widths])
            hub_w[ri.rank] = max([0.0, *(node_size(n)[0] for n in self.hubs(ri.rank))])
            head = max(text_width(ri.label, 15, True), text_width(ri.sub, 11))
            hubs = HUB_GAP + hub_w[ri.rank] if hub_w[ri.rank] else 0.0
            col_w[ri.rank] = max(MIN_COL, head, piece_w[ri.rank] + hubs)
        xs, x = {}, MARGIN
        for r in ranks:
            xs[r] = x
            x += col_w[r] + 2 * RANK_PAD + RANK_GAP
        top = MARGIN + RANK_HEAD
        y = top
        for walk in self.pg.walks:
            here = [(r, p) for (w, r), p in self.pg.pieces.items() if w == walk]
            if not here:
                continue
            row_h = max(self.lay.size(p)[1] for _, p in here)
            for r, p in here:
                h = self.lay.size(p)[1]
                self.lay.place_cluster(p, xs[r] + RANK_PAD, y + (row_h - h) / 2)
            y += row_h
            lanes = [i for i, lane in enumerate(self.lanes) if lane.walk == walk]
            if lanes:
                y += LANE_PAD
                for i in lanes:
                    self.lane_y[i] = y + LANE / 2
                    y += LANE
            y += ROW_GAP
        bottom = y - ROW_GAP + RANK_PAD
        for r in ranks:
            hx = xs[r] + RANK_PAD + col_w[r] - hub_w[r]
            bottom = max(bottom, self.place_hubs(r, hx, top) + RANK_PAD)
        for r in ranks:
            self.rank_boxes[r] = Box(xs[r], MARGIN, col_w[r] + 2 * RANK_PAD, bottom - MARGIN)
        width = x - RANK_GAP + MARGIN
        return Layout(width, bottom + MARGIN, self.lay.nodes, self.lay.boxes, self.lay.back)

    def place_hubs(self, r: int, x: float, top: float) -> float:
        """Rank ``r``'s hubs in its column's right edge, each at the mean height of what it
        connects to, pushed apart; returns the lowest bottom."""
        ends = [(e.src, e.dst) for e in self.g.edges] + [(e.src, e.dst) for e in self.pg.cross]
        wanted = []
        for order, n in enumerate(self.hubs(r)):
            ys = [
                self.lay.nodes[other].cy
                for a, b in ends
                for other in ((b,) if a == n.id else (a,) if b == n.id else ())
                if other in self.lay.nodes
            ]
            wanted.append((sum(ys) / len(ys) if ys else top, order, n))
        y_min, low = top, top
        for want, _, n in sorted(wanted, key=lambda t: (t[0], t[1])):
            w, h = node_size(n)
            y = max(want - h / 2, y_min)
            self.lay.nodes[n.id] = Box(x, y, w, h)
            y_min = y + h + 24
            low = y + h
        return low


class _Lane:
    def __init__(self, src: str, walk: str, label: str, kind: str) -> None:
        self.src, self.walk, self.label, self.kind = src, walk, label, kind
        self.edges: list[CrossEdge] = []


def _lanes(pg: PlanGraph) -> list[_Lane]:
    """Cross-rank edges grouped by (producer, kind, label): one lane each."""
    lanes: dict[tuple[str, str, str], _Lane] = {}
    for e in pg.cross:
        key = (e.src, e.kind, e.label)
        if key not in lanes:
            lanes[key] = _Lane(e.src, e.walk, e.label, e.kind)
        lanes[key].edges.append(e)
    return list(lanes.values())


def render_plan_html(plan: Plan) -> str:
    pg = build_plan_graph(plan)
    grid = _Grid(pg)
    lay = grid.place()
    env = jinja2.Environment(autoescape=True, keep_trailing_newline=True)
    template = env.from_string(
        resources.files("wgc.show").joinpath("plan_page.html.j2").read_text(encoding="utf-8")
    )
    ranks = [
        (
            r.rank,
            f"{r.device} · {r.host}",
            [
                (n.name, n.engine + (f" [{', '.join(n.labels)}]" if n.labels else ""))
                for n in r.nodes
            ],
            [
                ("KV cache", human_bytes(r.memory.kv_bytes)),
                ("static buffers", human_bytes(r.memory.static_buffer_bytes)),
                ("streams", human_bytes(r.memory.stream_bytes)),
                ("total", human_bytes(r.memory.total)),
            ],
        )
        for r in plan.ranks
    ]
    legend = [(k, s.color, H._DASH[s.dash], s.legend) for k, s in EDGE_STYLES.items()]
    return template.render(
        title=pg.name,
        sources=[s.path for s in plan.sources],
        ranks=ranks,
        transfers=_traffic(plan),
        quiet=_quiet(plan),
        restarts=restart_rows(plan),
        restart=restart_text(plan),
        legend=legend,
        highlight=HIGHLIGHT,
        svg=markupsafe.Markup(_svg(pg, grid, lay)),
    )


def _traffic(plan: Plan) -> list[tuple[str, list[tuple[str, str, list[tuple[str, ...]]]], str]]:
    """Per walk: (name, [(heading, subtotal, hops)], total at max iterations) for the sidebar."""
    ix = PlanIndex(plan)
    out = []
    for w in cross_rank_summary(plan):
        groups = []
        for lt in w.per_iteration:
            times = ix.iterations(w.walk, lt.loop)
            head = f"each iteration of {lt.loop} (≤ {times})"
            groups.append((head, human_bytes(lt.nbytes), _hops(lt.transfers)))
        if w.per_request:
            groups.append(("once per request", human_bytes(w.request_bytes), _hops(w.per_request)))
        total, dynamic = request_total(ix, w)
        out.append((w.walk, groups, total_text(total, dynamic)))
    return out


def _hops(transfers) -> list[tuple[str, ...]]:
    return [(f"{t.src_rank} → {t.dst_rank}", t.channel, human_bytes(t.nbytes)) for t in transfers]


def _quiet(plan: Plan) -> str:
    moving = {t.walk for t in plan.transfers}
    return ", ".join(w.name for w in plan.walks if w.name not in moving)


def _svg(pg: PlanGraph, grid: _Grid, lay: Layout) -> str:
    g = pg.graph
    w, h = math.ceil(lay.width), math.ceil(lay.height)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family="system-ui, -apple-system, Segoe UI, sans-serif">',
        H._markers().replace(
            "</defs>",
            f'<marker id="arrow-cross" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
            f'markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{HIGHLIGHT}"/></marker></defs>',
        ),
    ]
    for ri in pg.ranks:
        out.append(_rank(ri, grid.rank_boxes[ri.rank]))
    for c in g.clusters:
        if c.kind == "walk":
            out.append(_piece(c, lay.clusters[c.id]))
        elif c.kind == "loop":
            out.append(H._cluster(c, lay.clusters[c.id]))
    bodies, labels = H._edges(g, lay)
    out += bodies
    cross_bodies, cross_labels = _cross(grid, lay)
    out += cross_bodies
    out += [H._node(n, lay.nodes[n.id]) for n in g.nodes]
    out += labels
    out += cross_labels
    out.append("</svg>")
    return "\n".join(out)


def _rank(ri, b: Box) -> str:
    n = H._n
    return (
        f'<g class="cluster rank" id="rank-{ri.rank}"><title>{escape(ri.title)}</title>'
        f'<rect x="{n(b.x)}" y="{n(b.y)}" width="{n(b.w)}" height="{n(b.h)}" rx="12"/>'
        f'<text x="{n(b.x + RANK_PAD)}" y="{n(b.y + 21)}" font-size="15" font-weight="700">'
        f"{escape(ri.label)}</text>"
        f'<text x="{n(b.x + RANK_PAD)}" y="{n(b.y + 37)}" font-size="11" class="rsub">'
        f"{escape(ri.sub)}</text></g>"
    )


def _piece(c, b: Box) -> str:
    n = H._n
    return (
        f'<g class="cluster walk"><title>{escape(c.label)}</title>'
        f'<rect x="{n(b.x)}" y="{n(b.y)}" width="{n(b.w)}" height="{n(b.h)}" rx="10"/>'
        f'<text x="{n(b.x + 12)}" y="{n(b.y + 19)}" font-size="13" font-weight="600">'
        f"{escape(c.label)}</text></g>"
    )


def _cross(grid: _Grid, lay: Layout) -> tuple[list[str], list[str]]:
    """Every lane: trunk down from the producer, along the lane, up into each consumer."""
    # where each lane end touches a box's bottom: spread along it, ordered by the far end's x
    ends: dict[str, list[tuple[float, int, int]]] = {}
    for i, lane in enumerate(grid.lanes):
        dst_x = [lay.nodes[e.dst].cx for e in lane.edges]
        ends.setdefault(lane.src, []).append((sum(dst_x) / len(dst_x), i, -1))
        for j, e in enumerate(lane.edges):
            ends.setdefault(e.dst, []).append((lay.nodes[lane.src].cx, i, j))
    at: dict[tuple[int, int], float] = {}
    for nid, items in ends.items():
        b = lay.nodes[nid]
        for k, (_, i, j) in enumerate(sorted(items)):
            at[(i, j)] = b.x + b.w * (k + 1) / (len(items) + 1)
    bodies, labels = [], []
    for i, lane in enumerate(grid.lanes):
        a = lay.nodes[lane.src]
        y = grid.lane_y[i]
        ax = at[(i, -1)]
        s = style(lane.kind)
        dash = f' stroke-dasharray="{H._DASH[s.dash]}"' if H._DASH[s.dash] else ""
        titles = "\n".join(e.title for e in lane.edges)
        paths = []
        for j, e in enumerate(lane.edges):
            b = lay.nodes[e.dst]
            bx = at[(i, j)]
            by = b.y if b.y > y else b.y + b.h  # a stream junction may sit below the lane
            pts = [(ax, a.y + a.h), (ax, y), (bx, y), (bx, by)]
            paths.append(H._rounded(pts, 7))
        under = "".join(f'<path d="{p}" class="glow"/>' for p in paths)
        lines = "".join(
            f'<path d="{p}" stroke="{HIGHLIGHT}"{dash} marker-end="url(#arrow-cross)"/>'
            for p in paths
        )
        bodies.append(
            f'<g class="edge cross {lane.kind}"><title>{escape(titles)}</title>{under}{lines}'
            + "".join(f'<path d="{p}" class="hit"/>' for p in paths)
            + "</g>"
        )
        rightward = min(lay.nodes[e.dst].cx for e in lane.edges) > a.cx
        lx, anchor = (ax + 8, "start") if rightward else (ax - 8, "end")
        labels.append(
            f'<text class="elabel xlabel" text-anchor="{anchor}" x="{H._n(lx)}" '
            f'y="{H._n(y - 4)}" fill="{HIGHLIGHT}"><title>{escape(titles)}</title>'
            f"{escape(lane.label)}</text>"
        )
    return bodies, labels
