"""Placement rules: a loaded `Placement` checked against the verified `Model` it places.

Invariants proved (codes owned):

* WG807 / WG808: every node and walk a group names exists in the model (with did-you-mean).
* WG811: every (walk, node) pair a flow can reach (see `wgc.placement.reach`: `placed(...)`
  conditions are decided by this placement) runs on some group: a group naming the node for all
  walks or for that walk, or, in an M* file, rank 0 when no group names the node at all.
* WG812: no (walk, node) pair that a walk of the model calls is placed by two groups (or twice
  by one), whether or not a flow reaches it under this placement: the entries contradict each
  other either way.
* WG813: the groups that run one KV cache have the same tensor- and sequence-parallel sizes. A kv-
  cache node and its `like X { label L }` copies share one cache per request. Per-walk placement
  may move that cache between groups — prefill on one group and decode on another (P/D
  disaggregation), or BAGEL's CFG passes on their own ranks reading the labels the prefill wrote —
  and lowering plans the transfer; but pages are sharded by tensor-parallel rank, so groups that
  hand a cache to each other must shard it alike.
* WG814: a stream's consumer runs on one rank group (same ranks and `tp`) in every walk that
  calls it: that group owns the stream's buffer, so a second group would never see the chunks.
* WG815: every `params` override names a declared param and has its kind (an int param takes an
  integer; a float param an integer or a number; bool and str params their own kind).
* WG820 (warning): a group restricted with `walks:` names a node none of those walks call, or a
  walk that calls none of its nodes: that entry never takes effect.

Checks that need no model (YAML shape, ranks, `tp`, devices, hosts, serving settings) belong
to `wgc.placement.load`. Pure: never raises on a partial model or placement, collects every
finding, reports each problem once.
"""

from __future__ import annotations

from collections import defaultdict

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import closest
from wgc.ir.decls import EngineKind
from wgc.ir.expr import Value, in_range
from wgc.ir.model import Model
from wgc.placement import restarts
from wgc.placement.model import Group, Named, Placement
from wgc.placement.reach import Pair, assignment, candidates, required_pairs

NAME = "placement"
CODES = ("WG807", "WG808", "WG811", "WG812", "WG813", "WG814", "WG815", "WG820", "WG853", "WG898")


def run(model: Model, placement: Placement) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    out += _unknown_names(model, placement)
    out += _unplaced(model, placement)
    out += _placed_twice(model, placement)
    out += _kv_tp(model, placement)
    out += _stream_consumers(model, placement)
    out += _params(model, placement)
    out += _no_effect(model, placement)
    out += restarts.check(model, placement)
    return sorted(out, key=Diagnostic.sort_key)


# ---------------------------------------------------------------- names (WG807, WG808)
def _unknown_names(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    nodes = [n.name for n in model.nodes]
    walks = [w.name for w in model.walks]
    for g in placement.groups:
        for n in g.nodes:
            if model.node(n.name) is None:
                out.append(_unknown("WG807", "node", n, nodes, model))
        for w in g.walks or ():
            if model.walk(w.name) is None:
                out.append(_unknown("WG808", "walk", w, walks, model))
    return out


def _unknown(code: str, what: str, named: Named, choices: list[str], model: Model) -> Diagnostic:
    close = closest(named.name, choices)
    if close:
        hint = f"did you mean `{close}`?"
    else:
        listed = ", ".join(f"`{c}`" for c in choices[:12])
        hint = f"the {what}s of `{model.name}` are {listed}" if choices else None
    return diag(
        code,
        f"`{model.name}` has no {what} `{named.name}`",
        named.span,
        label=f"unknown {what}",
        help=hint,
    )


# ---------------------------------------------------------------- coverage (WG811)
def _unplaced(model: Model, placement: Placement) -> list[Diagnostic]:
    missing: dict[str, list[tuple[str, Span]]] = defaultdict(list)
    # A node in a group with a misspelt walk (WG808) probably meant that walk: no second error.
    excused = {
        n.name
        for g in placement.groups
        if any(model.walk(w.name) is None for w in g.walks or ())
        for n in g.nodes
    }
    for (walk, node), call_span in required_pairs(model, placement).items():
        if node in excused or candidates(placement, walk, node):
            continue
        if placement.default_ranks and not placement.placed(node):
            continue  # M*: a node no group names runs on the default ranks
        missing[node].append((walk, call_span))
    return [_unplaced_diag(placement, node, uses) for node, uses in missing.items()]


def _unplaced_diag(placement: Placement, node: str, uses: list[tuple[str, Span]]) -> Diagnostic:
    walks = [w for w, _ in uses]
    first_walk, first_call = uses[0]
    partly = placement.placed(node)
    ranks = _suggest_ranks(placement, node)
    keys = ("node_names", "graph_walks", "node_groups") if placement.format == "mstar" else None
    nodes_key, walks_key, list_key = keys or ("nodes", "walks", "place")
    entry = f"- {{{nodes_key}: [{node}], ranks: [{', '.join(map(str, ranks))}]"
    entry += f", {walks_key}: [{', '.join(walks)}]}}" if partly else "}"
    where = placement.groups_span or Span(placement.file, 1, 1, 1, 2)
    more = f" (and {len(walks) - 1} more)" if len(walks) > 1 else ""
    return diag(
        "WG811",
        f"node `{node}` is not placed for walk `{first_walk}`{more}, which a flow can run",
        where,
        label=f"no group runs `{node}`" + (f" in {_names(walks)}" if partly else ""),
        labels=[Label(first_call, f"`{first_walk}` calls `{node}` here")],
        help=f"add `{entry}` under `{list_key}:`"
        + (f", or add `{node}` to a group for every walk" if not partly else ""),
    )


def _suggest_ranks(placement: Placement, node: str) -> tuple[int, ...]:
    for g in placement.groups:
        if any(n.name == node for n in g.nodes) and g.ranks:
            return g.ranks
    for g in placement.groups:
        if g.ranks:
            return g.ranks
    return (0,)


# ---------------------------------------------------------------- overlaps (WG812)
def _placed_twice(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    for g in placement.groups:
        seen: dict[str, Named] = {}
        for n in g.nodes:
            if n.name in seen:
                out.append(
                    diag(
                        "WG812",
                        f"node `{n.name}` is listed twice in one group",
                        n.span,
                        label="listed again",
                        labels=[Label(seen[n.name].span, "first listed here")],
                        help=f"list `{n.name}` once",
                    )
                )
            seen.setdefault(n.name, n)
    clashes: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for w in model.walks:
        if model.walk(w.name) is not w:
            continue
        for node in dict.fromkeys(c.node for c in w.calls):
            found = candidates(placement, w.name, node)
            for other in found[1:]:
                clashes[(node, found[0], other)].append(w.name)
    for (node, first, second), walks in clashes.items():
        a, b = placement.groups[first], placement.groups[second]
        out.append(
            diag(
                "WG812",
                f"node `{node}` is placed by two groups for {_names(walks, 'walk')}",
                _named(b, node).span,
                label=f"second group for `{node}`",
                labels=[Label(_named(a, node).span, "first placed here")],
                help=f"a (walk, node) runs on exactly one group: remove `{node}` from one "
                f"group, or restrict them to different walks with `walks: [...]`",
            )
        )
    return out


def _named(group: Group, node: str) -> Named:
    return next((n for n in group.nodes if n.name == node), Named(node, group.span))


# ---------------------------------------------------------------- kv caches (WG813)
def _kv_family(model: Model, node: str) -> str | None:
    """The node whose KV cache ``node`` uses: its `like` base for a labelled copy, else itself."""
    n = model.node(node)
    if n is None or n.engine is not EngineKind.KV_CACHE:
        return None
    seen = {n.name}
    while n.like is not None and n.label is not None:
        base = model.node(n.like)
        if base is None or base.name in seen:
            break
        n = base
        seen.add(n.name)
    return n.name


def _kv_tp(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    families: dict[str, dict[tuple[int, int], tuple[str, Group]]] = defaultdict(dict)
    for (_, node), group in assignment(model, placement).items():
        family = _kv_family(model, node)
        if family is not None:
            families[family].setdefault((group.tp, group.sp), (node, group))
    for family, by_size in families.items():
        if len(by_size) < 2:
            continue
        (_, (node_a, a)), *rest = sorted(by_size.items(), key=lambda kv: kv[1][1].span)
        for _, (node_b, b) in rest:
            if a.sp == b.sp:
                what = f"tensor-parallel sizes {a.tp} and {b.tp}"
                key = "`tp`"
            else:
                what = f"parallel sizes {_sizes(a)} and {_sizes(b)}"
                key = "`tp` and `sp`"
            out.append(
                diag(
                    "WG813",
                    f"the kv cache of `{family}` is shared by groups with {what}",
                    _named(b, node_b).span,
                    label=f"`{node_b}` runs with {_sizes(b)} here",
                    labels=[Label(_named(a, node_a).span, f"`{node_a}` runs with {_sizes(a)}")],
                    help=f"KV pages are sharded per tensor- and sequence-parallel rank and move "
                    f"between these groups: give both the same {key}, or run every walk that "
                    f"uses the `{family}` cache on one group",
                )
            )
    return out


def _sizes(g: Group) -> str:
    return f"tp {g.tp}" if g.sp == 1 else f"tp {g.tp}, sp {g.sp}"


# ---------------------------------------------------------------- streams (WG814)
def _stream_consumers(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    # the groups of each node, indexed once: a scan of every pair per stream was quadratic
    by_node: dict[str, list[tuple[str, Group]]] = defaultdict(list)
    for (walk, node), group in assignment(model, placement).items():
        by_node[node].append((walk, group))
    for stream in model.streams:
        consumer = stream.consumer.node
        homes: dict[tuple, tuple[str, Group]] = {}
        for walk, group in by_node.get(consumer, ()):
            homes.setdefault((group.ranks, group.tp), (walk, group))
        if len(homes) < 2:
            continue
        (walk_a, a), *rest = sorted(homes.values(), key=lambda wg: wg[1].span)
        for walk_b, b in rest:
            out.append(
                diag(
                    "WG814",
                    f"stream `{stream.name}` feeds `{consumer}`, which runs on ranks "
                    f"{list(a.ranks)} in `{walk_a}` but on ranks {list(b.ranks)} in `{walk_b}`",
                    _named(b, consumer).span,
                    label="second rank group",
                    labels=[Label(_named(a, consumer).span, "first rank group")],
                    help=f"the consumer's group owns the stream buffer: run `{consumer}` on "
                    f"one group for every walk",
                )
            )
    return out


# ---------------------------------------------------------------- params (WG815)
def _params(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    names = [p.name for p in model.params]
    for o in placement.params:
        p = model.param(o.name)
        if p is None and o.optional:
            continue  # an M* model argument this model has no param for
        if p is None:
            close = closest(o.name, names)
            out.append(
                diag(
                    "WG815",
                    f"`params` overrides `{o.name}`, which `{model.name}` does not declare",
                    o.span,
                    label="unknown param",
                    help=f"did you mean `{close}`?"
                    if close
                    else "override a `param` the model declares",
                )
            )
            continue
        if p.value is None or value_fits(p.value, o.value):
            continue
        if not in_range(o.value):
            out.append(
                diag(
                    "WG815",
                    f"the override of param `{o.name}` is out of range",
                    o.value_span or o.span,
                    label="not a 64-bit number",
                    help="param values are 64-bit integers (-2^63 to 2^63 - 1) or finite floats",
                )
            )
            continue
        out.append(
            diag(
                "WG815",
                f"param `{o.name}` is {kind_name(p.value)}, but the override is "
                f"{kind_name(o.value)} `{o.value}`",
                o.value_span or o.span,
                label=f"expected {kind_name(p.value)}",
                labels=[Label(p.name_span or p.span, f"declared {kind_name(p.value)} here")],
                help=f"write {kind_name(p.value)}, like the declared `{p.value}`",
            )
        )
    return out


def value_fits(declared: Value, value: Value) -> bool:
    """Whether ``value`` may override a param declared as ``declared`` (and is in range)."""
    if not in_range(value):
        return False
    if isinstance(declared, bool) or isinstance(value, bool):
        return isinstance(declared, bool) and isinstance(value, bool)
    if isinstance(declared, float):
        return isinstance(value, int | float)
    return type(declared) is type(value)


def kind_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return "a string"


# ---------------------------------------------------------------- dead entries (WG820)
def _no_effect(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    for g in placement.groups:
        if g.walks is None:
            continue
        walks = [(w, ir) for w in g.walks if (ir := model.walk(w.name)) is not None]
        nodes = [n for n in g.nodes if model.node(n.name) is not None]
        if not walks or not nodes:
            continue
        calls = {w.name: {c.node for c in ir.calls} for w, ir in walks}
        dead_nodes = [n for n in nodes if not any(n.name in c for c in calls.values())]
        for n in dead_nodes:
            out.append(
                diag(
                    "WG820",
                    f"node `{n.name}` is placed only for {_names([w.name for w, _ in walks])}, "
                    f"which {'does' if len(walks) == 1 else 'do'} not call it",
                    n.span,
                    label="never runs here",
                    help=f"remove `{n.name}` from this group, or list the walks that call it",
                )
            )
        if len(dead_nodes) == len(nodes):
            continue
        for w, _ in walks:
            if not calls[w.name] & {n.name for n in nodes}:
                out.append(
                    diag(
                        "WG820",
                        f"walk `{w.name}` calls none of this group's nodes",
                        w.span,
                        label="nothing to place",
                        help=f"remove `{w.name}` from `walks`",
                    )
                )
    return out


def _names(names: list[str], singular: str = "walk") -> str:
    names = list(dict.fromkeys(names))
    if len(names) == 1:
        return f"{singular} `{names[0]}`"
    return f"{singular}s " + ", ".join(f"`{n}`" for n in names)


__all__ = ["CODES", "NAME", "Pair", "kind_name", "run", "value_fits"]
