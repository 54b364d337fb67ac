"""A small layered layout of the drawing model, for the self-contained HTML view.

Each cluster (walk, loop, `par`) lays out its direct members left to right in layers: a member's
layer is the longest dependency path to it from the cluster's sources, counting only edges that
go forward in time (everything but loop-carried ones) between members of this cluster. Members of
one layer stack vertically in source order. Walks stack top to bottom; the hubs (stream
junctions, `client`, `persisted`) sit in a column to their right, each at the average height of
what it connects to. Text widths are estimated (no font metrics without a browser), generously.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from wgc.show.graph import Cluster, GNode, Graph
from wgc.show.style import style

NODE_H = {"call": 40, "input": 32, "client": 40, "persisted": 44, "stream": 44}
COL_GAP = 84  # room for an edge label between layers
ROW_GAP = 16
PAD = 14
HEAD = {"walk": 30, "loop": 24, "par": 18}
BACK_LANE = 13  # below a loop's members: one lane per group of back edges
WALK_GAP = 36
MARGIN = 24
HUB_LANE = 190


def text_width(s: str, size: float, bold: bool = False) -> float:
    return len(s) * size * (0.64 if bold else 0.58)


@dataclass
class Box:
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2


@dataclass
class Layout:
    width: float
    height: float
    nodes: dict[str, Box]
    clusters: dict[str, Box]
    back: dict[str, list[tuple[str, str]]]  # loop cluster -> its back-edge groups, in lane order


def node_size(n: GNode) -> tuple[float, float]:
    main = 13 if n.kind == "call" else 11
    w = max(text_width(n.label, main, bold=n.kind == "call"), text_width(n.sub, 10)) + 26
    return max(w, 44), NODE_H[n.kind]


def layout(g: Graph) -> Layout:
    lay = _Layouter(g)
    y = MARGIN
    width = 0.0
    for c in g.clusters:
        if c.parent is None:
            w, h = lay.size(c.id)
            lay.place_cluster(c.id, MARGIN, y)
            y += h + WALK_GAP
            width = max(width, w)
    hub_x = MARGIN + width + HUB_LANE
    bottom = lay.place_hubs(hub_x, MARGIN)
    hubs_w = max((lay.nodes[n.id].w for n in g.nodes if n.cluster is None), default=0.0)
    total_w = hub_x + hubs_w + MARGIN if hubs_w else MARGIN + width + MARGIN
    return Layout(total_w, max(y, bottom + MARGIN), lay.nodes, lay.boxes, lay.back)


def back_groups(g: Graph) -> dict[str, list[tuple[str, str]]]:
    """Per loop cluster, its back (loop-carried) edges grouped by (source, label).

    A group is drawn as one trunk under the loop's members that branches up into each target,
    so `combine_cfg` carrying `latents, time_index` to four calls draws one labelled lane.
    """
    cluster_of = {n.id: n.cluster for n in g.nodes}
    kinds = {c.id: c for c in g.clusters}
    out: dict[str, list[tuple[str, str]]] = {}
    for e in g.edges:
        if not style(e.kind).back:
            continue
        loop = cluster_of.get(e.src)
        while loop is not None and kinds[loop].kind != "loop":
            loop = kinds[loop].parent
        if loop is None:
            continue
        groups = out.setdefault(loop, [])
        if (e.src, e.label) not in groups:
            groups.append((e.src, e.label))
    return out


def loop_of_back_edge(g: Graph, lay: Layout, src: str, label: str) -> tuple[str, int] | None:
    for loop, groups in lay.back.items():
        if (src, label) in groups:
            return loop, groups.index((src, label))
    return None


class _Layouter:
    def __init__(self, g: Graph) -> None:
        self.g = g
        self.by_id: dict[str, Cluster] = {c.id: c for c in g.clusters}
        self.node_cluster = {n.id: n.cluster for n in g.nodes}
        self.sizes: dict[tuple[str, str], tuple[float, float]] = {}
        self.layers: dict[str, list[list[tuple[str, str]]]] = {}
        self.nodes: dict[str, Box] = {}
        self.boxes: dict[str, Box] = {}
        self.back = back_groups(g)

    # ------------------------------------------------------------------ sizes
    def item_size(self, item: tuple[str, str]) -> tuple[float, float]:
        if item not in self.sizes:
            kind, iid = item
            self.sizes[item] = self.size(iid) if kind == "cluster" else node_size(self.g.node(iid))
        return self.sizes[item]

    def size(self, cid: str) -> tuple[float, float]:
        c = self.by_id[cid]
        cols = self.columns(cid)
        content_w = sum(max(self.item_size(i)[0] for i in col) for col in cols)
        content_w += COL_GAP * max(len(cols) - 1, 0)
        content_h = max(
            (sum(self.item_size(i)[1] for i in col) + ROW_GAP * (len(col) - 1) for col in cols),
            default=0.0,
        )
        label_w = text_width(c.label, 12 if c.kind == "walk" else 11, bold=c.kind == "walk")
        # a loop's back-edge labels start at their source's centre and run right
        lane_labels = [text_width(lbl, 10.5) for _, lbl in self.back.get(cid, [])]
        content_w += max([w - 30 for w in lane_labels if w > 30], default=0.0)
        w = max(content_w, label_w, 60) + 2 * PAD
        h = content_h + HEAD[c.kind] + PAD + self.back_room(cid)
        return w, h

    def back_room(self, cid: str) -> float:
        groups = self.back.get(cid, [])
        return BACK_LANE * len(groups) + 8 if groups else 0.0

    def columns(self, cid: str) -> list[list[tuple[str, str]]]:
        if cid not in self.layers:
            self.layers[cid] = self._columns(cid)
        return self.layers[cid]

    def _columns(self, cid: str) -> list[list[tuple[str, str]]]:
        members = list(self.g.members[cid])
        if not members:
            return []
        index = {m: i for i, m in enumerate(members)}
        dag = nx.DiGraph()
        dag.add_nodes_from(range(len(members)))
        for e in self.g.edges:
            if style(e.kind).back:
                continue
            a, b = self.member_of(cid, e.src), self.member_of(cid, e.dst)
            if a is not None and b is not None and a != b:
                dag.add_edge(index[a], index[b])
        if not nx.is_directed_acyclic_graph(dag):
            # a cycle outside a loop is an error the verifier reports; draw in source order
            dag.remove_edges_from([(u, v) for u, v in list(dag.edges) if u > v])
        layer: dict[int, int] = {}
        for v in nx.lexicographical_topological_sort(dag):
            layer[v] = max((layer[u] + 1 for u in dag.predecessors(v)), default=0)
        cols: list[list[tuple[str, str]]] = [[] for _ in range(max(layer.values()) + 1)]
        for i, m in enumerate(members):
            cols[layer[i]].append(m)
        return cols

    def member_of(self, cid: str, node_id: str) -> tuple[str, str] | None:
        """The direct member of cluster ``cid`` that contains node ``node_id``, if any."""
        cur = self.node_cluster.get(node_id)
        if cur is None:
            return None
        item = ("node", node_id)
        while cur is not None and cur != cid:
            item = ("cluster", cur)
            cur = self.by_id[cur].parent
        return item if cur == cid else None

    # ------------------------------------------------------------------ positions
    def place_cluster(self, cid: str, x: float, y: float) -> None:
        c = self.by_id[cid]
        w, h = self.size(cid)
        self.boxes[cid] = Box(x, y, w, h)
        cols = self.columns(cid)
        inner_h = h - HEAD[c.kind] - PAD - self.back_room(cid)
        cx = x + PAD
        for col in cols:
            col_w = max(self.item_size(i)[0] for i in col)
            col_h = sum(self.item_size(i)[1] for i in col) + ROW_GAP * (len(col) - 1)
            cy = y + HEAD[c.kind] + (inner_h - col_h) / 2
            for item in col:
                iw, ih = self.item_size(item)
                ix = cx + (col_w - iw) / 2
                if item[0] == "cluster":
                    self.place_cluster(item[1], ix, cy)
                else:
                    self.nodes[item[1]] = Box(ix, cy, iw, ih)
                cy += ih + ROW_GAP
            cx += col_w + COL_GAP

    def place_hubs(self, x: float, top: float) -> float:
        """Hubs at the mean height of their neighbours, pushed apart; returns the lowest edge."""
        wanted = []
        for order, n in enumerate(n for n in self.g.nodes if n.cluster is None):
            ys = [
                self.nodes[other].cy
                for e in self.g.edges
                for other in ((e.dst,) if e.src == n.id else (e.src,) if e.dst == n.id else ())
                if other in self.nodes
            ]
            wanted.append((sum(ys) / len(ys) if ys else top, order, n))
        y_min = top
        for want, _, n in sorted(wanted, key=lambda t: (t[0], t[1])):
            w, h = node_size(n)
            y = max(want - h / 2, y_min)
            self.nodes[n.id] = Box(x, y, w, h)
            y_min = y + h + 28
        return y_min
