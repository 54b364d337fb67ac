"""The drawing model of a `.walk` file, built once from the IR and shared by dot, mermaid, html.

A `Graph` is clusters (one per walk; nested ones per loop and per `par`), nodes (calls, walk
inputs, one `client`, one `persisted` store, one junction per stream) and edges with a `kind`
that says how to draw them. Edges of one kind between the same two nodes are merged, their
channels joined into one label, so a loop carrying `latents, time_index` draws one back edge.

Streams go through a junction node (`stream NAME` with its policy) rather than as one edge per
(producer call, consumer call) pair: Qwen3-Omni's Thinker is called in four walks and its Talker
in three, and twelve parallel edges per stream say less than one hub.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.ir.model import Model
from wgc.ir.walk import Block, Call, Edge, EdgeKind, Emit, EndKind, Loop, Par, Persist, Walk
from wgc.show import describe as d

CLIENT = "client"
PERSISTED = "persisted"


@dataclass(frozen=True, slots=True)
class GNode:
    id: str
    kind: str  # "call" | "input" | "client" | "persisted" | "stream"
    label: str  # main text (node name, input name, ...)
    sub: str  # second line (`#3`, the policy, ...)
    cluster: str | None  # innermost cluster id
    title: str  # hover text


@dataclass(frozen=True, slots=True)
class GEdge:
    src: str
    dst: str
    kind: str  # an `EdgeKind` value
    label: str
    title: str


@dataclass(frozen=True, slots=True)
class Cluster:
    id: str
    kind: str  # "walk" | "loop" | "par"
    label: str
    parent: str | None
    walk: str


@dataclass(frozen=True, slots=True)
class Graph:
    model: str
    clusters: tuple[Cluster, ...]
    nodes: tuple[GNode, ...]
    edges: tuple[GEdge, ...]
    # per cluster, its members in source order: ("node", id) or ("cluster", id)
    members: dict[str, tuple[tuple[str, str], ...]] = field(compare=False)

    def node(self, nid: str) -> GNode:
        return next(n for n in self.nodes if n.id == nid)


def call_id(walk: str, call: int) -> str:
    return f"w_{walk}_c{call}"


def input_id(walk: str, name: str) -> str:
    return f"w_{walk}_in_{name}"


def stream_id(name: str) -> str:
    return f"s_{name}"


def build_graph(model: Model, walk: str | None = None) -> Graph:
    """The drawing of ``model`` (of one walk, with ``walk``)."""
    b = _Builder(model)
    for w in model.walks:
        if walk is None or w.name == walk:
            b.walk(w)
    return b.finish()


class _Builder:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.clusters: list[Cluster] = []
        self.nodes: list[GNode] = []
        self.members: dict[str, list[tuple[str, str]]] = {}
        self.edges: dict[tuple[str, str, str], list[str]] = {}  # insertion-ordered
        self.titles: dict[tuple[str, str, str], list[str]] = {}
        self.extra: dict[str, GNode] = {}  # client, persisted, stream junctions, by id

    # ------------------------------------------------------------------ clusters and nodes
    def cluster(self, cid: str, kind: str, label: str, parent: str | None, walk: str) -> str:
        self.clusters.append(Cluster(cid, kind, label, parent, walk))
        self.members[cid] = []
        if parent is not None:
            self.members[parent].append(("cluster", cid))
        return cid

    def add_node(self, n: GNode) -> None:
        self.nodes.append(n)
        if n.cluster is not None:
            self.members[n.cluster].append(("node", n.id))

    def walk(self, w: Walk) -> None:
        wid = self.cluster(f"cw_{w.name}", "walk", f"walk {d.walk_signature(w)}", None, w.name)
        for i in w.inputs:
            typ = d.type_text(i.type, i.type_ref) if i.type or i.type_ref else "untyped"
            sub = ("optional " if i.optional else "") + typ
            title = f"walk input {d.walk_input(i)}"
            self.add_node(GNode(input_id(w.name, i.name), "input", i.name, sub, wid, title))
        self.block(w, w.body, wid, [0])
        for e in w.edges:
            self.edge(w, e)

    def block(self, w: Walk, b: Block, parent: str, counter: list[int]) -> None:
        for s in b.stmts:
            if isinstance(s, Call):
                title = f"{d.call_text(s)}\n\n{d.node_title(self.model, s.node)}"
                n = GNode(call_id(w.name, s.id), "call", s.node, f"#{s.id}", parent, title)
                self.add_node(n)
            elif isinstance(s, Par):
                counter[0] += 1
                cid = self.cluster(f"cp_{w.name}_{counter[0]}", "par", "par", parent, w.name)
                for br in s.branches:
                    self.block(w, br, cid, counter)
            elif isinstance(s, Loop):
                label = d.loop_header(s, compact=True)
                if s.yield_last or s.yield_all:
                    label += " · " + d.yields_text(s)
                cid = self.cluster(f"cl_{w.name}_{s.name}", "loop", label, parent, w.name)
                self.block(w, s.body, cid, counter)
            # emit and persist are drawn as edges to the client and the persisted store
            assert isinstance(s, Call | Par | Loop | Emit | Persist)

    # ------------------------------------------------------------------ edges
    def end_node(self, w: Walk, e, channel: str) -> str | None:
        if e.kind is EndKind.CALL:
            return call_id(w.name, e.call)
        if e.kind is EndKind.INPUT:
            return input_id(w.name, e.name)
        if e.kind is EndKind.CLIENT:
            return self.hub(CLIENT, "client", "client", "", "the request's client")
        if e.kind is EndKind.PERSIST:
            title = "values kept after a walk, for later walks of the request"
            return self.hub(PERSISTED, "persisted", "persisted", "", title)
        if e.kind is EndKind.STREAM:
            return self.stream_hub(e.name)
        return None  # `until`: the loop's label says it

    def hub(self, nid: str, kind: str, label: str, sub: str, title: str) -> str:
        self.extra.setdefault(nid, GNode(nid, kind, label, sub, None, title))
        return nid

    def stream_hub(self, name: str) -> str:
        s = self.model.stream(name)
        if s is None:
            return self.hub(stream_id(name), "stream", f"stream {name}", "", f"stream {name}")
        sub = d.policy_text(s.policy, compact=True)
        title = (
            f"stream {d.stream_header(s)}\nchunk {d.policy_text(s.policy)}\nfinal {s.final.value}"
        )
        if s.after_done_continue:
            title += "\nafter_done continue"
        return self.hub(stream_id(name), "stream", f"stream {name}", sub, title)

    def edge(self, w: Walk, e: Edge) -> None:
        if e.kind is EdgeKind.UNTIL:
            return
        src = self.end_node(w, e.src, e.channel)
        dst = self.end_node(w, e.dst, e.channel)
        if src is None or dst is None:
            return
        key = (src, dst, e.kind.value)
        label = _edge_label(e)
        labels = self.edges.setdefault(key, [])
        if label and label not in labels:
            labels.append(label)
        title = f"{e.kind.value} {e.channel}: {d.end_text(w, e.src)} -> {d.end_text(w, e.dst)}"
        if e.type is not None:
            title += f" : {e.type}"
        titles = self.titles.setdefault(key, [])
        if title not in titles:
            titles.append(title)

    def finish(self) -> Graph:
        # hubs in a fixed order: streams as declared, then the client, then the store
        order = [stream_id(s.name) for s in self.model.streams] + [CLIENT, PERSISTED]
        hubs = [self.extra[i] for i in order if i in self.extra]
        hubs += [n for i, n in sorted(self.extra.items()) if i not in order]
        edges = tuple(
            GEdge(src, dst, kind, ", ".join(labels), "\n".join(self.titles[(src, dst, kind)]))
            for (src, dst, kind), labels in self.edges.items()
        )
        members = {k: tuple(v) for k, v in self.members.items()}
        return Graph(self.model.name, tuple(self.clusters), (*self.nodes, *hubs), edges, members)


def _edge_label(e: Edge) -> str:
    if e.dst.kind is EndKind.CLIENT:
        return e.dst.name or ""
    if e.kind is EdgeKind.TERMINAL:
        return f"last {e.channel}"
    if e.kind is EdgeKind.ACCUMULATED:
        return f"all {e.channel}"
    if e.kind is EdgeKind.STREAMED:
        # the junction names the stream; name the port only when it is called differently
        port = (e.src.port if e.src.kind is EndKind.CALL else e.dst.port) or ""
        return "" if port == e.channel else port
    if e.kind is EdgeKind.INPUT or (e.kind is EdgeKind.LOOP_INIT and e.src.kind is EndKind.INPUT):
        # the input node already shows the channel; name the port only when it differs
        return "" if e.dst.port in (None, e.channel) else f"{e.channel} → {e.dst.port}"
    return e.channel
