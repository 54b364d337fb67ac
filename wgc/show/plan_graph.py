"""The drawing model of a placed plan, and its Graphviz and Mermaid renderings.

Ranks are the outer clusters; inside a rank, one cluster per walk piece it runs, and inside a
piece its own copy of every loop (so BAGEL's `denoise`, spread over three ranks, is drawn three
times). Calls sit in the innermost one. Walk inputs are drawn in every piece that reads them
(the conductor sends each its copy); `client`, `persisted` and the stream junctions are hubs
outside the ranks, as in the IR view (`wgc.show.graph`, whose records this reuses).

Edges are split in two: *local* ones (both ends on one rank, or a hub) are drawn like the IR
view's edges, and *cross-rank* hops (`CrossEdge`) are highlighted and labelled with the bytes of
one hop (``latents 1.0 KiB``) and when they travel (``/iter`` per loop iteration, else once per
request), from the plan's transfers. One cross edge merges the channels of one kind between the
same two boxes, like the IR view does.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.lower.plan import Plan, Transfer
from wgc.show.dot import _NODE_SHAPES, q
from wgc.show.dot import _edge as dot_edge
from wgc.show.graph import Cluster, GEdge, GNode, Graph, call_id, stream_id
from wgc.show.mermaid import _CLASSES, _SHAPES, edge_lines, ident, text
from wgc.show.plan_text import human_bytes, spec_text
from wgc.show.style import style
from wgc_runtime.contract.kinds import DestKind
from wgc_runtime.contract.spec import CallSpec, PieceSpec, PortOut, SinkSpec

HIGHLIGHT = "#e11d48"  # cross-rank hops, in every drawing


@dataclass(frozen=True, slots=True)
class CrossEdge:
    src: str
    dst: str
    kind: str  # the IR edge kind of the hop
    label: str  # ``latents 1.0 KiB, time_index 8 B /iter``
    title: str
    src_rank: int
    dst_rank: int
    walk: str


@dataclass(frozen=True, slots=True)
class RankInfo:
    rank: int
    cluster: str
    label: str  # ``rank 0``
    sub: str  # ``cuda:0 · 127.0.0.1 · 8.1 MiB``
    title: str


@dataclass(frozen=True, slots=True)
class PlanGraph:
    name: str  # ``bagel @ 3xh100``
    graph: Graph  # rank, piece and loop clusters; nodes; LOCAL edges only
    ranks: tuple[RankInfo, ...]
    walks: tuple[str, ...]  # rows, in plan order
    pieces: dict[tuple[str, int], str]  # (walk, rank) -> piece cluster id
    cross: tuple[CrossEdge, ...]
    hub_ranks: dict[str, int]  # hub node id -> the rank whose column it is drawn in


def rank_cluster(r: int) -> str:
    return f"r{r}"


def piece_cluster(walk: str, r: int) -> str:
    return f"p_{walk}_r{r}"


def loop_cluster(walk: str, loop: str, r: int) -> str:
    return f"l_{walk}_{loop}_r{r}"


def client_node(r: int) -> str:
    return f"client_r{r}"


def persisted_node(r: int) -> str:
    return f"persisted_r{r}"


def input_node(walk: str, r: int, name: str) -> str:
    return f"w_{walk}_r{r}_in_{name}"


def sink_call(u: SinkSpec) -> CallSpec:
    """A sink unit drawn as a call: an `emit` / `persist` box fed like a call, with one output
    going where the unit sends its value."""
    what = "emit" if u.dest.kind is DestKind.CLIENT else "persist"
    out = PortOut(port=u.input.channel, type=u.input.type, dests=(u.dest,))
    return CallSpec(
        id=u.id,
        node=what,
        rank=u.rank,
        loops=u.loops,
        inputs=(u.input,),
        outputs=(out,),
        source=u.source,
    )


def _units(piece: PieceSpec) -> tuple[CallSpec, ...]:
    return (*piece.calls, *(sink_call(u) for u in piece.sinks))


def build_plan_graph(plan: Plan) -> PlanGraph:
    b = _Builder(plan)
    for r in plan.ranks:
        b.rank(r.rank)
        for piece in r.pieces:
            b.piece(piece)
    for r in plan.ranks:
        for piece in r.pieces:
            for c in _units(piece):
                b.call_edges(piece, c)
    return b.finish()


class _Builder:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.clusters: list[Cluster] = []
        self.members: dict[str, list[tuple[str, str]]] = {}
        self.nodes: list[GNode] = []
        self.hubs: dict[str, GNode] = {}
        self.hub_ranks: dict[str, int] = {}
        self.ranks: list[RankInfo] = []
        self.pieces: dict[tuple[str, int], str] = {}
        # (src, dst, kind) -> labels, titles; insertion-ordered
        self.local: dict[tuple[str, str, str], tuple[list[str], list[str]]] = {}
        self.cross: dict[tuple[str, str, str], tuple[list[str], list[str], int, int, str]] = {}
        self.streams = [s for r in plan.ranks for s in r.streams]
        self.hops: dict[tuple[str, int, str, int, str], Transfer] = {}
        for t in plan.transfers:
            if t.call is not None and t.port is not None:
                self.hops.setdefault((t.walk, t.call, t.port, t.dst_rank, t.edge), t)
        # (walk, call, port) -> the channel it reads, for labels
        self.channels: dict[tuple[str, int, str], str] = {}
        self.calls: dict[tuple[str, int], CallSpec] = {}
        for r in plan.ranks:
            for piece in r.pieces:
                for c in _units(piece):
                    self.calls[(piece.walk, c.id)] = c
                    for i in c.inputs:
                        self.channels[(piece.walk, c.id, i.port)] = i.channel

    # ------------------------------------------------------------------ clusters and nodes
    def cluster(self, cid: str, kind: str, label: str, parent: str | None, walk: str) -> None:
        self.clusters.append(Cluster(cid, kind, label, parent, walk))
        self.members[cid] = []
        if parent is not None:
            self.members[parent].append(("cluster", cid))

    def add_node(self, n: GNode) -> None:
        self.nodes.append(n)
        assert n.cluster is not None
        self.members[n.cluster].append(("node", n.id))

    def rank(self, r: int) -> None:
        rp = self.plan.ranks[r]
        m = rp.memory
        cid = rank_cluster(r)
        self.cluster(cid, "rank", f"rank {r}", None, "")
        nodes = "\n".join(
            f"  {n.name} ({n.engine}"
            + (f" [{', '.join(n.labels)}]" if n.labels else "")
            + (f", tp {n.tp}" if n.tp > 1 else "")
            + ")"
            for n in rp.nodes
        )
        title = (
            f"rank {r} on {rp.device}, host {rp.host}\nnodes:\n{nodes or '  (none)'}\n"
            f"memory: KV {human_bytes(m.kv_bytes)} + static buffers "
            f"{human_bytes(m.static_buffer_bytes)} + streams {human_bytes(m.stream_bytes)} "
            f"= {human_bytes(m.total)}"
        )
        if rp.streams:
            title += "\nowns streams: " + ", ".join(s.name for s in rp.streams)
        sub = f"{rp.device} · {rp.host} · {human_bytes(m.total)}"
        self.ranks.append(RankInfo(r, cid, f"rank {r}", sub, title))

    def piece(self, piece: PieceSpec) -> None:
        r = piece.rank
        pid = piece_cluster(piece.walk, r)
        self.pieces[(piece.walk, r)] = pid
        self.cluster(pid, "walk", f"walk {piece.walk}", rank_cluster(r), piece.walk)
        for name in piece.inputs:
            title = f"walk input {name} (sent to rank {r} by the conductor)"
            self.add_node(GNode(input_node(piece.walk, r, name), "input", name, "", pid, title))
        loops = {lp.name: lp for lp in piece.loops}
        made: set[str] = set()

        def ensure(name: str) -> str:
            lid = loop_cluster(piece.walk, name, r)
            if name not in made:
                made.add(name)
                lp = loops.get(name)
                parent = ensure(lp.parent) if lp is not None and lp.parent else pid
                label = f"loop {name}"
                if lp is not None:
                    label += f" max {lp.max}"
                    if len(lp.ranks) > 1:
                        label += " · ranks " + ", ".join(str(x) for x in lp.ranks)
                self.cluster(lid, "loop", label, parent, piece.walk)
            return lid

        for c in sorted(_units(piece), key=lambda c: c.id):
            parent = ensure(c.loops[-1]) if c.loops else pid
            for outer in c.loops:
                ensure(outer)
            title = f"{c.node} #{c.id} on rank {r} ({c.source})"
            self.add_node(
                GNode(call_id(piece.walk, c.id), "call", c.node, f"#{c.id}", parent, title)
            )
        for lp in piece.loops:  # copies with no call of this rank (it only feeds them)
            ensure(lp.name)

    def hub(self, nid: str, kind: str, label: str, sub: str, title: str, rank: int) -> str:
        self.hubs.setdefault(nid, GNode(nid, kind, label, sub, None, title))
        self.hub_ranks.setdefault(nid, rank)
        return nid

    def stream_hub(self, name: str) -> str:
        s = next((s for s in self.streams if s.name == name), None)
        if s is None:
            return self.hub(stream_id(name), "stream", f"stream {name}", "", f"stream {name}", 0)
        item = spec_text(s.item)
        title = (
            f"stream {name}: {s.producer[0]}.{s.producer[1]} -> {s.consumer[0]}.{s.consumer[1]}"
            f"\nbuffer owned by rank {s.owner}: {s.capacity} x {item}\nchunk {s.policy}"
        )
        return self.hub(
            stream_id(name), "stream", f"stream {name}", f"on rank {s.owner}", title, s.owner
        )

    # ------------------------------------------------------------------ edges
    def call_edges(self, piece: PieceSpec, c: CallSpec) -> None:
        w, r, me = piece.walk, piece.rank, call_id(piece.walk, c.id)
        for i in c.inputs:
            for src, kind in ((i.src, "input"), (i.init, "loop_init")):
                if src is not None and src.kind == "input" and src.name:
                    label = "" if i.port == src.name else f"{src.name} → {i.port}"
                    title = f"{kind} {src.name} -> {c.node}#{c.id}.{i.port}"
                    self.add_local(input_node(w, r, src.name), me, kind, label, title)
            if i.src.kind == "stream" and i.src.name:
                title = f"streamed {i.src.name} -> {c.node}.{i.port}"
                label = "" if i.port == i.src.name else i.port
                self.add_local(self.stream_hub(i.src.name), me, "streamed", label, title)
        for o in c.outputs:
            for d in o.dests:
                self.dest_edge(w, r, c, o.port, o.type, d)

    def dest_edge(self, w: str, r: int, c: CallSpec, port: str, typ, d) -> None:
        me = call_id(w, c.id)
        if d.kind == "client":
            title = f"the request's client (emits of rank {r} go to it through the conductor)"
            dst = self.hub(client_node(r), "client", "client", "", title, r)
            self.add_local(me, dst, "emitted", d.name or "", f"emit {port} as {d.name}")
            return
        if d.kind == "persist":
            title = f"values rank {r} keeps after a walk, for later walks of the request"
            dst = self.hub(persisted_node(r), "persisted", "persisted", "", title, r)
            self.add_local(me, dst, "persisted", d.name or port, f"persist {d.name}")
            return
        if d.kind == "stream" and d.name:
            dst, channel, dst_rank = self.stream_hub(d.name), d.name, d.rank
        elif d.kind == "call" and d.call is not None:
            dst = call_id(w, d.call)
            channel = self.channels.get((w, d.call, d.port or ""), port)
            dst_rank = d.rank
        else:
            return  # `until`: the loop's label says it
        label = {"terminal": f"last {channel}", "accumulated": f"all {channel}"}.get(
            d.edge, channel
        )
        title = f"{d.edge} {channel}: {c.node}#{c.id}.{port} (rank {r}) -> "
        title += f"stream {d.name}" if d.kind == "stream" else self._call_text(w, d)
        title += f" : {spec_text(typ)}"
        if dst_rank is None or dst_rank == r:
            self.add_local(me, dst, d.edge, label, title)
            return
        hop = self.hops.get((w, c.id, port, dst_rank, d.edge))
        nbytes = hop.nbytes if hop is not None else None
        per = f" per iteration of {hop.loop}" if hop is not None and hop.per == "iteration" else ""
        title += f", {human_bytes(nbytes)}{per or ' per request'}"
        key = (me, dst, d.edge)
        labels, titles, *_ = self.cross.setdefault(key, ([], [], r, dst_rank, w))
        text_ = f"{label} {human_bytes(nbytes)}"
        if per:
            text_ += " /iter"
        if text_ not in labels:
            labels.append(text_)
        if title not in titles:
            titles.append(title)

    def _call_text(self, w: str, d) -> str:
        callee = self.calls.get((w, d.call))
        node = callee.node if callee is not None else "?"
        return f"{node}#{d.call}.{d.port} (rank {d.rank})"

    def add_local(self, src: str, dst: str, kind: str, label: str, title: str) -> None:
        labels, titles = self.local.setdefault((src, dst, kind), ([], []))
        if label and label not in labels:
            labels.append(label)
        if title not in titles:
            titles.append(title)

    def finish(self) -> PlanGraph:
        order = [stream_id(s.name) for s in self.streams]
        order += [f(r.rank) for r in self.plan.ranks for f in (client_node, persisted_node)]
        hubs = [self.hubs[i] for i in order if i in self.hubs]
        hubs += [n for i, n in sorted(self.hubs.items()) if i not in order]
        edges = tuple(
            GEdge(src, dst, kind, ", ".join(labels), "\n".join(titles))
            for (src, dst, kind), (labels, titles) in self.local.items()
        )
        cross = tuple(
            CrossEdge(src, dst, kind, _join_cross(labels), "\n".join(titles), sr, dr, w)
            for (src, dst, kind), (labels, titles, sr, dr, w) in self.cross.items()
        )
        members = {k: tuple(v) for k, v in self.members.items()}
        g = Graph(self.plan.model, tuple(self.clusters), (*self.nodes, *hubs), edges, members)
        walks = tuple(w.name for w in self.plan.walks)
        name = f"{self.plan.model} @ {self.plan.placement}"
        return PlanGraph(name, g, tuple(self.ranks), walks, self.pieces, cross, self.hub_ranks)


def _join_cross(labels: list[str]) -> str:
    """``latents 1.0 KiB /iter`` and ``time_index 8 B /iter`` -> one ``/iter`` at the end."""
    if labels and all(lbl.endswith(" /iter") for lbl in labels):
        return ", ".join(lbl[: -len(" /iter")] for lbl in labels) + " /iter"
    return ", ".join(labels)


# ---------------------------------------------------------------- Graphviz

_DOT_CLUSTERS = {
    "rank": 'style="rounded,filled"; fillcolor="#f1f5f9"; color="#334155"; penwidth=1.6; '
    "fontsize=14",
    "walk": 'style="rounded,filled"; fillcolor="#ffffff"; color="#9ca3af"; fontsize=11',
    "loop": 'style="rounded,filled"; fillcolor="#fff7ed"; color="#ea580c"; fontsize=10',
}


def render_plan_dot(plan: Plan) -> str:
    pg = build_plan_graph(plan)
    g = pg.graph
    out = [
        f"digraph {q(pg.name)} {{",
        '  graph [rankdir=LR, compound=true, newrank=true, fontname="Helvetica", nodesep=0.3];',
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9, arrowsize=0.7];',
    ]
    subs = {ri.cluster: ri for ri in pg.ranks}
    for c in g.clusters:
        if c.parent is None:
            out += _dot_cluster(pg, c, subs, 1)
    out += [f"  {_dot_node(n)}" for n in _loose(pg)]
    out += [f"  {dot_edge(e)}" for e in g.edges]
    for e in pg.cross:
        s = style(e.kind)
        attrs = [
            f"color={q(HIGHLIGHT)}",
            f"fontcolor={q(HIGHLIGHT)}",
            "penwidth=2.4",
            f"label={q(e.label)}",
            f"tooltip={q(e.title)}",
        ]
        if s.dash != "solid":
            attrs.append(f"style={s.dash}")
        if s.back:
            attrs.append("constraint=false")
        out.append(f"  {q(e.src)} -> {q(e.dst)} [{', '.join(attrs)}];")
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_node(n: GNode) -> str:
    label = n.label + (f"\n{n.sub}" if n.sub else "")
    return f"{q(n.id)} [label={q(label)}, tooltip={q(n.title)}, {_NODE_SHAPES[n.kind]}];"


def _rank_hubs(pg: PlanGraph, c: Cluster) -> list[GNode]:
    """The hubs drawn inside rank cluster ``c`` (its client, persisted store, owned streams)."""
    return [
        n
        for n in pg.graph.nodes
        if n.cluster is None
        and c.kind == "rank"
        and rank_cluster(pg.hub_ranks.get(n.id, -1)) == c.id
    ]


def _loose(pg: PlanGraph) -> list[GNode]:
    return [n for n in pg.graph.nodes if n.cluster is None and n.id not in pg.hub_ranks]


def _dot_cluster(pg: PlanGraph, c: Cluster, subs: dict[str, RankInfo], depth: int) -> list[str]:
    g = pg.graph
    pad = "  " * depth
    label = c.label
    tooltip = ""
    if c.id in subs:
        label = f"{c.label}\n{subs[c.id].sub}"
        tooltip = f" tooltip={q(subs[c.id].title)};"
    out = [
        f"{pad}subgraph {q('cluster_' + c.id)} {{",
        f"{pad}  label={q(label)}; {_DOT_CLUSTERS[c.kind]};{tooltip}",
    ]
    by_id = {x.id: x for x in g.clusters}
    for kind, mid in g.members[c.id]:
        if kind == "node":
            out.append(f"{pad}  {_dot_node(g.node(mid))}")
        else:
            out += _dot_cluster(pg, by_id[mid], subs, depth + 1)
    out += [f"{pad}  {_dot_node(n)}" for n in _rank_hubs(pg, c)]
    out.append(f"{pad}}}")
    return out


# ---------------------------------------------------------------- Mermaid


def render_plan_mermaid(plan: Plan) -> str:
    pg = build_plan_graph(plan)
    g = pg.graph
    out = ["flowchart LR"]
    subs = {ri.cluster: ri for ri in pg.ranks}
    by_id = {c.id: c for c in g.clusters}
    for c in g.clusters:
        if c.parent is None:
            out += _mermaid_cluster(pg, c, by_id, subs, 1)
    out += ["  " + _mermaid_node(n) for n in _loose(pg)]
    link_styles = []
    index = 0
    for e in g.edges:
        line, link_style = edge_lines(e, index)
        out.append(line)
        link_styles.append(link_style)
        index += 1
    for e in pg.cross:
        out.append(f"  {ident(e.src)} ==>|{text(e.label)}| {ident(e.dst)}")
        link_styles.append(
            f"  linkStyle {index} stroke:{HIGHLIGHT},color:{HIGHLIGHT},stroke-width:3px"
        )
        index += 1
    out += link_styles
    out += [f"  classDef {k} {v}" for k, v in _CLASSES.items()]
    out += [
        "  classDef rank fill:#f1f5f9,stroke:#334155,stroke-width:2px",
        "  classDef walk fill:#ffffff,stroke:#9ca3af",
        "  classDef loop fill:#fff7ed,stroke:#ea580c",
    ]
    for kind in ("rank", "walk", "loop"):
        ids = [ident(c.id) for c in g.clusters if c.kind == kind]
        if ids:
            out.append(f"  class {','.join(ids)} {kind}")
    return "\n".join(out) + "\n"


def _mermaid_cluster(
    pg: PlanGraph, c: Cluster, by_id: dict[str, Cluster], subs: dict[str, RankInfo], depth: int
) -> list[str]:
    g = pg.graph
    pad = "  " * depth
    label = f"{c.label}\n{subs[c.id].sub}" if c.id in subs else c.label
    out = [f"{pad}subgraph {ident(c.id)}[{text(label)}]", f"{pad}  direction LR"]
    for kind, mid in g.members[c.id]:
        if kind == "node":
            out.append(f"{pad}  {_mermaid_node(g.node(mid))}")
        else:
            out += _mermaid_cluster(pg, by_id[mid], by_id, subs, depth + 1)
    out += [f"{pad}  {_mermaid_node(n)}" for n in _rank_hubs(pg, c)]
    out.append(f"{pad}end")
    return out


def _mermaid_node(n: GNode) -> str:
    left, right = _SHAPES[n.kind]
    label = n.label + (f"\n{n.sub}" if n.sub else "")
    return f"{ident(n.id)}{left}{text(label)}{right}:::{n.kind}"
