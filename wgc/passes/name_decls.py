"""The `names` pass's checks of declarations: `like` bases, kv-cache labels, `impl`s, ports and
type names (WG104, WG109, WG110, WG111, WG115), and the helpers its messages share. Not a pass
of its own: `wgc.passes.names` runs these."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Protocol, TypeVar

import networkx as nx

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir.decls import EngineKind, Port
from wgc.ir.model import Model
from wgc.ir.types import DTYPE_NAMES


# ---------------------------------------------------------------- helpers
def listing(what: str, names: Iterable[str]) -> str:
    names = list(dict.fromkeys(names))
    if not names:
        return f"there are no {what}"
    shown = ", ".join(f"`{n}`" for n in names[:8])
    return f"{what}: {shown}" + (", ..." if len(names) > 8 else "")


def unknown_help(word: str, choices: Iterable[str], what: str, fallback: str) -> str:
    choices = list(choices)
    dym = did_you_mean(word, choices)
    if dym:
        return dym
    return f"{fallback}; {listing(what, choices)}" if choices else fallback


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_T = TypeVar("_T")


def _name(item: _Named) -> str:
    return item.name


def first_dupes(
    items: Iterable[_T], key: Callable[[_T], Hashable] = _name
) -> Iterator[tuple[_T, _T]]:
    """(duplicate, first) for every item whose key (by default its name) was seen before."""
    first: dict[Hashable, _T] = {}
    for it in items:
        k = key(it)
        if k in first:
            yield it, first[k]
        else:
            first[k] = it


# ---------------------------------------------------------------- nodes
def like_bases(model: Model, out: list[Diagnostic]) -> set[str]:
    """Report WG110; return the nodes whose `like` chain is broken (unknown base or a cycle)."""
    graph = nx.DiGraph()
    bad: set[str] = set()
    for n in model.nodes:
        if n.like is None:
            continue
        if n.like == n.name:
            out.append(
                diag(
                    "WG110",
                    f"node `{n.name}` is `like` itself",
                    n.span,
                    label="`like` names this node",
                    help="`like` copies another node's engine, impl and ports; name a different "
                    "node or declare this one's engine",
                )
            )
            bad.add(n.name)
        elif model.node(n.like) is None:
            out.append(
                diag(
                    "WG110",
                    f"node `{n.name}` is `like` unknown node `{n.like}`",
                    n.span,
                    label=f"`{n.like}` is not declared",
                    help=unknown_help(
                        n.like,
                        (m.name for m in model.nodes if m.name != n.name),
                        "nodes",
                        "name a declared node",
                    ),
                )
            )
            bad.add(n.name)
        else:
            graph.add_edge(n.name, n.like)
    order = {n.name: i for i, n in reversed(list(enumerate(model.nodes)))}
    for cycle in sorted(nx.simple_cycles(graph), key=lambda c: min(order[x] for x in c)):
        if len(cycle) < 2:
            continue
        start = min(cycle, key=order.__getitem__)
        i = cycle.index(start)
        cycle = cycle[i:] + cycle[:i]
        path = " -> ".join(f"`{x}`" for x in (*cycle, start))
        # every node of a cycle is declared: an edge only joins a node to a declared base
        first, *others = [n for x in cycle if (n := model.node(x)) is not None]
        out.append(
            diag(
                "WG110",
                f"`like` cycle: {path}",
                first.span,
                label="this node's `like` chain comes back to it",
                labels=[Label(o.span, f"`{o.name}` is `like` `{o.like}`") for o in others],
                help="one node of the chain must declare its own engine, impl and ports",
            )
        )
        bad.update(cycle)
    # nodes `like` a broken node inherit nothing either
    for n in model.nodes:
        broken_base = n.name in graph and any(d in bad for d in nx.descendants(graph, n.name))
        if n.name not in bad and broken_base:
            bad.add(n.name)
    return bad


def labels(model: Model, bad_like: set[str]) -> list[Diagnostic]:
    out = []
    for n in model.nodes:
        if n.like is None and n.engine is EngineKind.KV_CACHE and n.label is None:
            seen: set[str] = set()
            for lb in n.labels:
                if lb in seen:
                    out.append(
                        diag(
                            "WG111",
                            f"label `{lb}` is listed twice in `kv_cache(labels = [...])` "
                            f"of `{n.name}`",
                            n.span,
                            label=f"`{lb}` appears twice",
                            help="list each KV-cache label once",
                        )
                    )
                seen.add(lb)
        if n.label is None or n.name in bad_like:
            continue
        span = n.label_span or n.span
        base = model.node(n.like) if n.like else None
        if base is None:
            out.append(
                diag(
                    "WG111",
                    f"`label` on `{n.name}`, which is not `like` another node",
                    span,
                    label="`label` needs a `like` base",
                    help="declare a node's labels with `kv_cache(labels = [...])`; `label L` "
                    "picks one of them for a node `like` it: `node N2: like N { label L }`",
                )
            )
        elif base.engine is not EngineKind.KV_CACHE:
            out.append(
                diag(
                    "WG111",
                    f"`label` on `{n.name}`, but its base `{base.name}` has no KV cache",
                    span,
                    label="labels select a KV-cache label",
                    labels=[Label(base.span, f"`{base.name}` is `stateless`")],
                    help="remove the `label`, or make the base a `kv_cache(labels = [...])` node",
                )
            )
        elif n.label not in base.labels:
            dym = did_you_mean(n.label, base.labels)
            out.append(
                diag(
                    "WG111",
                    f"`{n.label}` is not a label of `{base.name}`",
                    span,
                    label="unknown label",
                    labels=[Label(base.span, f"`{base.name}` declares its labels here")],
                    help=(dym + " " if dym else "")
                    + listing(f"the labels of `{base.name}`", base.labels),
                )
            )
    return out


def impls(model: Model, bad_like: set[str]) -> list[Diagnostic]:
    out = []
    for n in model.nodes:
        inherited = n.like is not None  # a `like` node without impl: its base is reported
        if n.impl is None and n.name not in bad_like and not inherited:
            out.append(
                diag(
                    "WG115",
                    f"node `{n.name}` has no `impl`",
                    n.span,
                    label="no `impl` in this node",
                    help=f'add `impl "package.module:Class"` to `{n.name}`, naming the class '
                    "that implements it",
                )
            )
    return out


def _own_ports(model: Model) -> list[Port]:
    """Every declared port once (a `like` node shares its base's `Port` objects)."""
    seen: set[Span] = set()
    ports = []
    for n in model.nodes:
        for p in (*n.inputs, *n.outputs):
            if p.span not in seen:
                seen.add(p.span)
                ports.append(p)
    return ports


def node_ports(model: Model) -> list[Diagnostic]:
    out = []
    seen: set[Span] = set()
    for n in model.nodes:
        for ports in (n.inputs, n.outputs):
            for dup, first in first_dupes(ports):
                if dup.span in seen:  # inherited through `like`: reported on the base
                    continue
                seen.add(dup.span)
                out.append(
                    diag(
                        "WG109",
                        f"node `{n.name}` declares {dup.direction.value} port `{dup.name}` twice",
                        dup.span,
                        label="second declaration",
                        labels=[Label(first.span, "first declared here")],
                        help="rename or remove one of the two ports",
                    )
                )
    for p in _own_ports(model):
        if p.type_ref is not None:
            out += type_name(model, p.type_ref, p.span, f"port `{p.name}`")
    return out


# ---------------------------------------------------------------- WG104 types
def type_name(model: Model, ref: str, span: Span, user: str) -> list[Diagnostic]:
    if model.type(ref) is not None:
        return []
    choices = [t.name for t in model.types] + list(DTYPE_NAMES)
    dym = did_you_mean(ref, choices)
    return [
        diag(
            "WG104",
            f"unknown type `{ref}` for {user}",
            span,
            label=f"`{ref}` is not a declared type",
            help=dym
            or f"declare it with `type {ref} = dtype[dims]`, or write the type inline, "
            "e.g. `f32[N]`",
        )
    ]


def type_aliases(model: Model) -> list[Diagnostic]:
    out = []
    graph = nx.DiGraph()
    for t in model.types:
        if t.ref is None or t.ref in DTYPE_NAMES:  # a bare dtype is the `types` pass's WG202
            continue
        if model.type(t.ref) is None:
            out += type_name(model, t.ref, t.span, f"type `{t.name}`")
        else:
            graph.add_edge(t.name, t.ref)
    order = {t.name: i for i, t in reversed(list(enumerate(model.types)))}
    for cycle in nx.simple_cycles(graph):
        start = min(cycle, key=order.__getitem__)
        i = cycle.index(start)
        cycle = cycle[i:] + cycle[:i]
        first = model.type(start)
        assert first is not None
        if len(cycle) == 1:
            message = f"type `{start}` is defined as itself"
        else:
            message = "type aliases form a cycle: " + " = ".join(f"`{x}`" for x in (*cycle, start))
        others = [model.type(x) for x in cycle[1:]]
        out.append(
            diag(
                "WG104",
                message,
                first.span,
                label="this alias never reaches a tensor type",
                labels=[Label(o.span, f"`{o.name}` = `{o.ref}`") for o in others if o],
                help=f"give one alias of the cycle a tensor type, e.g. `type {start} = f32[N]`",
            )
        )
    return out
