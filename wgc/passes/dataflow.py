"""Pass `dataflow`: every read is fed, no call waits on itself, and loops can stop.

Works on the edges and issues `wgc.ir.resolve` computed for each walk.

Invariants proved (and codes owned):

- WG601: every channel a call's port reads is bound in the walk or is a walk input.
- WG602: the calls of a walk, linked by the edges that deliver a value within one run of a scope
  (internal, input, terminal, accumulated, loop-invariant, loop-init; not loop-carried, not
  streamed), form a DAG: a cycle (a call reading its own output included) only makes sense
  through a loop's previous iteration.
- WG603: a loop's `until` channel is `bool[]`.
- WG604: a loop's `until` channel is bound in the loop body.
- WG605: a loop-carried channel has a value before iteration 0.
- WG606: every emitted or persisted channel is bound.
- WG607: an inner loop's loop-carried channel does not start from a value an outer loop
  carries (its start would differ per outer iteration; not supported yet by the runtime).
- WG608 (warning): two calls of one `kv_cache` node in a walk are ordered by dataflow. Each call
  changes the request's cache, so unordered calls would leave the order to timing: the runtime
  runs calls as their data arrives, the reference interpreter in statement order.

`call_graph(walk)` and `topological_calls(walk)` are reused by later stages (lowering).
"""

from __future__ import annotations

import networkx as nx

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir.decls import EngineKind
from wgc.ir.model import Model
from wgc.ir.types import DType, TensorType
from wgc.ir.walk import Call, Edge, EdgeKind, EndKind, Issue, IssueKind, Walk

NAME = "dataflow"
CODES: tuple[str, ...] = (
    "WG601",
    "WG602",
    "WG603",
    "WG604",
    "WG605",
    "WG606",
    "WG607",
    "WG608",
)

# Edges that hand a value from one call to another within one execution of their scope.
CALL_ORDER_EDGES = frozenset(
    {
        EdgeKind.INTERNAL,
        EdgeKind.INPUT,
        EdgeKind.TERMINAL,
        EdgeKind.ACCUMULATED,
        EdgeKind.LOOP_INVARIANT,
        EdgeKind.LOOP_INIT,
    }
)


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for w in model.walks:
        out.extend(_issues(w))
        out.extend(_cycles(w))
        out.extend(_until_types(w))
        out.extend(_unordered_kv_calls(model, w))
    return out


def _unordered_kv_calls(model: Model, w: Walk) -> list[Diagnostic]:
    kv_calls: dict[str, list[Call]] = {}
    for c in w.calls:
        node = model.node(c.node)
        if node is not None and node.engine is EngineKind.KV_CACHE:
            kv_calls.setdefault(c.node, []).append(c)
    # the calls that share a cache, each one bit of a bitset (in walk order within one node)
    shared = [c.id for cs in kv_calls.values() if len(cs) > 1 for c in cs]
    if not shared:
        return []
    g = call_graph(w)
    if not nx.is_directed_acyclic_graph(g):
        return []  # WG602 first
    bits = {cid: 1 << k for k, cid in enumerate(shared)}
    related = _related(g, bits)
    out = []
    for name, calls in kv_calls.items():
        if len(calls) < 2:
            continue
        before = 0  # the bits of the calls of `name` before `later`
        for later in calls:
            unordered = before & ~related[later.id]
            if unordered:  # the first earlier call (lowest bit) neither before nor after it
                earlier = w.calls[shared[(unordered & -unordered).bit_length() - 1]]
                out.append(_unordered_kv(w, name, earlier, later))
            before |= bits[later.id]
    return out


def _related(g: nx.DiGraph, bit: dict[int, int]) -> dict[int, int]:
    """For each call id of ``bit`` (call id -> its bit): the bitset of those calls it reaches or
    is reached from in the acyclic ``g``, itself included.

    One sweep each way along a topological order: O((calls + edges) * len(bit) / word size),
    where a path query per pair of calls is cubic in a chain of calls."""
    order = list(nx.topological_sort(g))
    down: dict[int, int] = {}
    for v in reversed(order):
        mask = bit.get(v, 0)
        for s in g.successors(v):
            mask |= down[s]
        down[v] = mask
    up: dict[int, int] = {}
    for v in order:
        mask = bit.get(v, 0)
        for p in g.predecessors(v):
            mask |= up[p]
        up[v] = mask
    return {cid: down[cid] | up[cid] for cid in bit}


def _unordered_kv(w: Walk, node: str, earlier: Call, later: Call) -> Diagnostic:
    return diag(
        "WG608",
        f"calls of kv-cache node `{node}` in walk `{w.name}` are not ordered by data",
        later.name_span or later.span,
        label="may run before or after the other call",
        labels=[Label(earlier.name_span or earlier.span, "the other call of the same cache")],
        help="make one call read a channel the other binds, or move them into separate walks: "
        "each call changes the request's cache, so their order must not depend on timing",
    )


# ---------------------------------------------------------------------------------- graph


def call_graph(walk: Walk) -> nx.DiGraph:
    """Calls of ``walk`` (nodes: call ids, attribute ``call``) and the value edges between them
    within one run of a scope (attribute ``channels``: the channels carried, in edge order)."""
    g = nx.DiGraph()
    for c in walk.calls:
        g.add_node(c.id, call=c)
    for e in walk.edges:
        if e.kind not in CALL_ORDER_EDGES:
            continue
        if e.src.kind is not EndKind.CALL or e.dst.kind is not EndKind.CALL:
            continue
        if e.src.call is None or e.dst.call is None:
            continue
        if not g.has_edge(e.src.call, e.dst.call):
            g.add_edge(e.src.call, e.dst.call, channels=[])
        chans = g.edges[e.src.call, e.dst.call]["channels"]
        if e.channel not in chans:
            chans.append(e.channel)
    return g


def topological_calls(walk: Walk) -> list[int] | None:
    """Call ids of ``walk`` in an order that respects its call graph (ties in source order),
    or None when the graph has a cycle (WG602)."""
    g = call_graph(walk)
    if not nx.is_directed_acyclic_graph(g):
        return None
    return list(nx.lexicographical_topological_sort(g))


# ---------------------------------------------------------------------------------- issues


def _issues(w: Walk) -> list[Diagnostic]:
    out = []
    for i in w.issues:
        if i.kind is IssueKind.UNBOUND and i.reader in ("emit", "persist"):
            out.append(_unbound_sink(w, i))
        elif i.kind is IssueKind.UNBOUND and i.reader.startswith("port "):
            out.append(_unbound_port(w, i))
        elif i.kind is IssueKind.YIELD_UNBOUND and i.reader == "until":
            out.append(_until_unbound(w, i))
        elif i.kind is IssueKind.NO_INIT:
            out.append(_no_init(w, i))
        elif i.kind is IssueKind.NESTED_CARRIED:
            out.append(_nested_carried(w, i))
    return out


def bound_channels(w: Walk) -> list[str]:
    """Every channel name a walk binds (call writes, loop yields) or takes as input."""
    names = [i.name for i in w.inputs]
    names += [b.channel for c in w.calls for b in c.writes]
    for lp in w.loops:
        names += [n.name for n in (*lp.yield_last, *lp.yield_all)]
    return list(dict.fromkeys(names))


def _did_you_mean(w: Walk, channel: str) -> str:
    return did_you_mean(channel, [n for n in bound_channels(w) if n != channel], end=" ")


def _unbound_port(w: Walk, i: Issue) -> Diagnostic:
    ch = i.channel
    return diag(
        "WG601",
        f"{i.reader} reads channel `{ch}`, which nothing in walk `{w.name}` binds",
        i.span,
        label=f"`{ch}` is never bound",
        help=f"{_did_you_mean(w, ch)}bind `{ch}` earlier in the walk (`NODE(...) -> {ch}`), "
        f"or add it as a walk input `{ch}` (or `{ch}?` if it may arrive as a bare signal)",
    )


def _unbound_sink(w: Walk, i: Issue) -> Diagnostic:
    ch = i.channel
    verb = i.reader
    return diag(
        "WG606",
        f"`{verb}` of channel `{ch}`, which nothing in walk `{w.name}` binds",
        i.span,
        label=f"`{ch}` is never bound",
        help=f"{_did_you_mean(w, ch)}bind `{ch}` in the walk (`NODE(...) -> {ch}`) before "
        f"the `{verb}`",
    )


def _writes_of(w: Walk, channel: str, inside: str | None) -> list[tuple[Call, Span]]:
    """Bindings of ``channel`` by calls inside loop ``inside`` (or outside it when None)."""
    out = []
    for c in w.calls:
        if inside is not None and inside not in c.loops:
            continue
        for b in c.writes:
            if b.channel == channel:
                out.append((c, b.span))
    return out


def _until_unbound(w: Walk, i: Issue) -> Diagnostic:
    ch, loop = i.channel, i.loop or "?"
    outside = [sp for c, sp in _writes_of(w, ch, None) if loop not in c.loops]
    labels = [Label(i.other, f"loop `{loop}`")] if i.other else []
    if outside:
        labels.append(Label(outside[0], "bound outside the loop: it never changes inside it"))
    return diag(
        "WG604",
        f"`until` channel `{ch}` of loop `{loop}` is not bound in the loop body",
        i.span,
        label="not bound in the body",
        labels=labels,
        help=f"bind `{ch}` in the body of `{loop}`, e.g. `NODE(...) -> {ch}` from a `bool[]` "
        "port; the loop stops after the iteration that sets it",
    )


def _no_init(w: Walk, i: Issue) -> Diagnostic:
    ch, loop = i.channel, i.loop or "?"
    labels = []
    later = _writes_of(w, ch, loop)
    if later:
        labels.append(Label(later[0][1], "bound later in the body: read by the next iteration"))
    if i.other:
        labels.append(Label(i.other, f"loop `{loop}`"))
    return diag(
        "WG605",
        f"loop-carried channel `{ch}` has no value before loop `{loop}`",
        i.span,
        label="iteration 0 has nothing to read",
        labels=labels,
        help=f"bind `{ch}` before the loop, or add a walk input `{ch}?` for a bare-signal start",
    )


def _nested_carried(w: Walk, i: Issue) -> Diagnostic:
    ch, loop = i.channel, i.loop or "?"
    outer = next((lp for lp in w.loops if lp.name == loop), None)
    parent = next(
        (
            lp
            for lp in w.loops
            if outer is not None and outer.span != lp.span and _contains(lp, outer)
        ),
        None,
    )
    labels = [Label(i.other, f"inner loop `{loop}`")] if i.other else []
    if parent is not None and parent.header_span is not None:
        labels.append(Label(parent.header_span, f"`{ch}` is carried by loop `{parent.name}` too"))
    return diag(
        "WG607",
        f"loop `{loop}` starts `{ch}` from a value an enclosing loop carries",
        i.span,
        label=f"iteration 0 of `{loop}` would read a different `{ch}` per outer iteration",
        labels=labels,
        help=f"give the inner loop its own channel, e.g. bind `{ch}0 = {ch}` before it with a node "
        f"call and carry `{ch}0` inside, or restructure so only one loop carries `{ch}`",
        notes=(
            "an inner loop whose starting value is carried by an outer loop is not supported yet",
        ),
    )


def _contains(outer, inner) -> bool:
    a, b = outer.span, inner.span
    return (a.line, a.col) <= (b.line, b.col) and (b.end_line, b.end_col) <= (a.end_line, a.end_col)


# ---------------------------------------------------------------------------------- cycles


def _cycles(w: Walk) -> list[Diagnostic]:
    g = call_graph(w)
    out = []
    for comp in nx.strongly_connected_components(g):
        first = min(comp)
        if len(comp) == 1 and not g.has_edge(first, first):
            continue
        out.append(_cycle_diag(w, g, _one_cycle(g, comp, first)))
    return out


def _one_cycle(g: nx.DiGraph, comp: set[int], start: int) -> list[int]:
    """A simple cycle through ``start`` inside component ``comp``, as call ids from ``start``."""
    if g.has_edge(start, start):
        return [start]
    sub = g.subgraph(comp)
    # the shortest way back to `start` from one of its successors closes the shortest cycle
    best: list[int] | None = None
    for succ in sorted(sub.successors(start)):
        path = nx.shortest_path(sub, succ, start)
        if best is None or len(path) < len(best):
            best = [start, *path[:-1]]
    assert best is not None
    return best


def _read_span(call: Call, channels: list[str]) -> tuple[Span, str]:
    for b in call.reads:
        if b.channel in channels:
            return b.span, b.channel
    return call.name_span or call.span, channels[0]


def _cycle_diag(w: Walk, g: nx.DiGraph, cycle: list[int]) -> Diagnostic:
    calls = [g.nodes[c]["call"] for c in cycle]
    k = len(cycle)
    # reads[j]: where call j reads the value that call j-1 binds
    reads = []
    for j in range(k):
        prev = cycle[j - 1]
        span, ch = _read_span(calls[j], g.edges[prev, cycle[j]]["channels"])
        reads.append((span, ch))
    first = calls[0]
    help_ = (
        "break the cycle or put it in a `loop`: inside a loop, a read of a channel bound later "
        "sees the previous iteration's value"
    )
    if k == 1:
        return diag(
            "WG602",
            f"`{first.node}` reads `{reads[0][1]}`, which it binds itself, outside a loop",
            reads[0][0],
            label="reads its own output",
            help=f"read a channel bound earlier, or put the call in a `loop` and bind the first "
            f"`{reads[0][1]}` before it: inside a loop it reads the previous iteration's value",
        )
    path = " -> ".join(f"`{c.node}`" for c in (*calls, first))
    labels = [
        Label(reads[j][0], f"reads `{reads[j][1]}` from `{calls[j - 1].node}`") for j in range(1, k)
    ]
    return diag(
        "WG602",
        f"dataflow cycle outside a loop: {path}",
        reads[0][0],
        label=f"reads `{reads[0][1]}` from `{calls[-1].node}`, which needs this call's output",
        labels=labels,
        help=help_,
    )


# ---------------------------------------------------------------------------------- until


def _is_bool_scalar(t: TensorType) -> bool:
    return t.dtype is DType.BOOL and t.rank == 0


def _until_types(w: Walk) -> list[Diagnostic]:
    out = []
    for e in w.edges:
        if e.kind is not EdgeKind.UNTIL or e.type is None or _is_bool_scalar(e.type):
            continue
        out.append(_until_type(w, e))
    return out


def _until_type(w: Walk, e: Edge) -> Diagnostic:
    labels = []
    if e.src.kind is EndKind.CALL and e.src.call is not None and e.src.call < len(w.calls):
        call = w.calls[e.src.call]
        b = next((b for b in call.writes if b.channel == e.channel), None)
        if b is not None:
            labels.append(Label(b.span, f"bound from `{call.node}.{b.port}: {e.type}`"))
    return diag(
        "WG603",
        f"`until` channel `{e.channel}` of loop `{e.loop}` is `{e.type}`, not `bool[]`",
        e.span,
        label="not `bool[]`",
        labels=labels,
        help="`until` takes one flag per request: bind it from a `bool[]` port "
        "(the loop stops after the iteration that sets it)",
    )
