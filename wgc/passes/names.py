"""Pass `names`: every name resolves to exactly one declaration of the right kind.

Invariants proved (and the code reported when one fails):

* WG101: no two declarations of one kind share a name. Each kind has its own namespace (nodes,
  streams, walks, flows, subflows, params, types, options), because every use site says which
  kind it wants, except that walks and subflows share one (a flow calls both by name); loops of
  one walk share a namespace too (edges name their loop).
* WG102: every call, stream endpoint and `placed(NODE)` names a declared node.
* WG103: every port named by a call (inputs in its arguments, outputs after `->`) or by a stream
  endpoint exists on its node.
* WG104: every type name (port, walk input, `type A = B`) names a declared type; no alias is
  defined in terms of itself.
* WG105: every name in a loop `max` or a `repeat` count is a `param`. (The builder reports this
  for the expressions it evaluates: params, configs, option defaults; a chunk-policy argument
  that is not a static integer is `chunk_policy`'s WG502; `option.X` in a loop `max` is
  `loop_shape`'s WG303.)
* WG106 / WG107 / WG108: every flow call names a walk (or a subflow), every `flow ... on S` a
  stream, every `option.NAME` (in conditions, `match option.NAME`, walk arguments, a node's
  `reads`) a declared option. Subflow bodies are checked as written, so an uncalled one is too.
* WG109: a node does not declare two input (or two output) ports with one name; an input and an
  output may share a name (`in latents` / `out latents` is a node updating its state).
* WG110: a `like` base is another declared node and `like` chains are acyclic.
* WG111: `label` only appears on a node `like` a `kv_cache` node, names one of the base's
  labels, and `kv_cache(labels = [...])` lists each label once.
* WG112: one call binds each port once and each output channel once; one walk call passes each
  argument once; a walk declares each input once.
* WG113: call arguments are input ports, bindings after `->` are output ports.
* WG114: a flow passes only arguments its walk declares.
* WG115: every node has an `impl` (its own or inherited through `like`).

Stream endpoints that exist in the wrong direction are `chunk_policy`'s WG506; flow argument
values (`x = seg`, `x = persisted`) are the `flows` pass's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Protocol, TypeVar

import networkx as nx

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.decls import EngineKind, Node, Port, Stream
from wgc.ir.flow import (
    ArgKind,
    FBlock,
    Flow,
    FlowKind,
    OptionCmp,
    OptionCond,
    OptionMatch,
    Placed,
    Repeat,
    WalkCall,
    cond_atoms,
    iter_fstmts,
)
from wgc.ir.flow import If as FIf
from wgc.ir.model import Model
from wgc.ir.types import DTYPE_NAMES
from wgc.ir.walk import Call, Loop, Walk

NAME = "names"
CODES = (
    "WG101",
    "WG102",
    "WG103",
    "WG104",
    "WG105",
    "WG106",
    "WG107",
    "WG108",
    "WG109",
    "WG110",
    "WG111",
    "WG112",
    "WG113",
    "WG114",
    "WG115",
)


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    out += _duplicates(model)
    bad_like = _like_bases(model, out)
    out += _labels(model, bad_like)
    out += _impls(model, bad_like)
    out += _node_ports(model)
    out += _type_aliases(model)
    for s in model.streams:
        out += _stream(model, s)
    for n in model.nodes:
        for name, span in zip(n.reads, n.read_spans, strict=True):
            out += _option_name(model, name, span)
    for w in model.walks:
        out += _walk(model, w, bad_like)
    for f in model.flows:
        out += _flow(model, f)
    for sub in model.subflows:
        out += _flow_body(model, sub.body)
    return out


# ---------------------------------------------------------------- helpers
def _listing(what: str, names: Iterable[str]) -> str:
    names = list(dict.fromkeys(names))
    if not names:
        return f"there are no {what}"
    shown = ", ".join(f"`{n}`" for n in names[:8])
    return f"{what}: {shown}" + (", ..." if len(names) > 8 else "")


def _unknown_help(word: str, choices: Iterable[str], what: str, fallback: str) -> str:
    choices = list(choices)
    dym = did_you_mean(word, choices)
    if dym:
        return dym
    return f"{fallback}; {_listing(what, choices)}" if choices else fallback


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_T = TypeVar("_T")


def _name(item: _Named) -> str:
    return item.name


def _first_dupes(
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


# ---------------------------------------------------------------- WG101 duplicates
_KINDS = (
    ("param", "params"),
    ("type", "types"),
    ("option", "options"),
    ("node", "nodes"),
    ("stream", "streams"),
    ("walk", "walks"),
    ("flow", "flows"),
    ("subflow", "subflows"),
)


def _duplicates(model: Model) -> list[Diagnostic]:
    out = []
    for kind, attr in _KINDS:
        for dup, first in _first_dupes(getattr(model, attr)):
            out.append(
                diag(
                    "WG101",
                    f"{kind} `{dup.name}` is declared twice",
                    dup.span,
                    label=f"second declaration of `{dup.name}`",
                    labels=[Label(first.span, "first declared here")],
                    help=f"rename one of the two {kind}s or remove the duplicate",
                )
            )
    for sub in model.subflows:
        walk = model.walk(sub.name)
        if walk is not None and model.subflow(sub.name) is sub:
            out.append(
                diag(
                    "WG101",
                    f"`{sub.name}` names both a walk and a subflow",
                    sub.name_span or sub.span,
                    label="this subflow",
                    labels=[Label(walk.name_span or walk.span, "the walk")],
                    help="flows call walks and subflows by name: rename one of them",
                )
            )
    for w in model.walks:
        for dup, first in _first_dupes(w.loops):
            out.append(
                diag(
                    "WG101",
                    f"walk `{w.name}` has two loops named `{dup.name}`",
                    dup.header_span or dup.span,
                    label="second loop with this name",
                    labels=[Label(first.header_span or first.span, "first declared here")],
                    help="give every loop of a walk its own name",
                )
            )
    return out


# ---------------------------------------------------------------- nodes
def _like_bases(model: Model, out: list[Diagnostic]) -> set[str]:
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
                    help=_unknown_help(
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


def _labels(model: Model, bad_like: set[str]) -> list[Diagnostic]:
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
                    + _listing(f"the labels of `{base.name}`", base.labels),
                )
            )
    return out


def _impls(model: Model, bad_like: set[str]) -> list[Diagnostic]:
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


def _node_ports(model: Model) -> list[Diagnostic]:
    out = []
    seen: set[Span] = set()
    for n in model.nodes:
        for ports in (n.inputs, n.outputs):
            for dup, first in _first_dupes(ports):
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
            out += _type_name(model, p.type_ref, p.span, f"port `{p.name}`")
    return out


# ---------------------------------------------------------------- WG104 types
def _type_name(model: Model, ref: str, span: Span, user: str) -> list[Diagnostic]:
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


def _type_aliases(model: Model) -> list[Diagnostic]:
    out = []
    graph = nx.DiGraph()
    for t in model.types:
        if t.ref is None or t.ref in DTYPE_NAMES:  # a bare dtype is the `types` pass's WG202
            continue
        if model.type(t.ref) is None:
            out += _type_name(model, t.ref, t.span, f"type `{t.name}`")
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


# ---------------------------------------------------------------- WG105 / WG108 expressions
def _expr_names(model: Model, ex: E.Expr, where: str, options: bool = True) -> list[Diagnostic]:
    out = []
    params = [p.name for p in model.params]
    for r in E.refs(ex):
        if model.param(r.name) is None:
            dym = did_you_mean(r.name, params)
            out.append(
                diag(
                    "WG105",
                    f"unknown name `{r.name}` in {where}",
                    r.span,
                    label="not a `param`",
                    help=dym or f"declare it with `param {r.name} = VALUE`, or use a literal",
                )
            )
    for o in E.option_refs(ex) if options else ():
        out += _option_name(model, o.name, o.span)
    return out


def _option_name(model: Model, name: str, span: Span) -> list[Diagnostic]:
    if model.option(name) is not None:
        return []
    dym = did_you_mean(name, (o.name for o in model.options))
    return [
        diag(
            "WG108",
            f"unknown option `{name}`",
            span,
            label="not a declared option",
            help=dym or f"declare it with `option {name}: bool = false` (or `int`, `float`, `str`)",
        )
    ]


# ---------------------------------------------------------------- streams
def _stream(model: Model, s: Stream) -> list[Diagnostic]:
    out = []
    for ref, side in ((s.producer, "producer"), (s.consumer, "consumer")):
        node = model.node(ref.node)
        if node is None:
            out.append(_unknown_node(model, ref.node, ref.span, f"stream `{s.name}`'s {side}"))
            continue
        if node.port(ref.port) is not None:
            continue  # a port of the wrong direction is chunk_policy's WG506
        want = node.outputs if side == "producer" else node.inputs
        out.append(
            diag(
                "WG103",
                f"node `{node.name}` has no port `{ref.port}`",
                ref.span,
                label=f"unknown port of `{node.name}`",
                help=_unknown_help(
                    ref.port,
                    (p.name for p in want),
                    f"its {'output' if side == 'producer' else 'input'} ports",
                    f"a stream {side} is `NODE.PORT`",
                ),
            )
        )
    return out


def _unknown_node(model: Model, name: str, span: Span, user: str) -> Diagnostic:
    return diag(
        "WG102",
        f"unknown node `{name}` in {user}",
        span,
        label="not a declared node",
        help=_unknown_help(
            name,
            (n.name for n in model.nodes),
            "nodes",
            f"declare it with `node {name}: stateless {{ ... }}`",
        ),
    )


# ---------------------------------------------------------------- walks
def _walk(model: Model, w: Walk, bad_like: set[str]) -> list[Diagnostic]:
    out = []
    for dup, first in _first_dupes(w.inputs):
        out.append(
            diag(
                "WG112",
                f"walk `{w.name}` declares input `{dup.name}` twice",
                dup.span,
                label="second declaration",
                labels=[Label(first.span, "first declared here")],
                help="remove or rename one of the two inputs",
            )
        )
    for inp in w.inputs:
        if inp.type_ref is not None:
            out += _type_name(model, inp.type_ref, inp.span, f"walk input `{inp.name}`")
    for loop in w.loops:
        out += _loop(model, loop)
    for call in w.calls:
        if call.node not in bad_like:  # its ports are unknown: WG110 says why
            out += _call(model, call)
    return out


def _loop(model: Model, loop: Loop) -> list[Diagnostic]:
    # any `option.X` in `max` is already wrong (WG303), known or not
    return _expr_names(model, loop.max_expr, f"the `max` of loop `{loop.name}`", options=False)


def _call(model: Model, call: Call) -> list[Diagnostic]:
    node = model.node(call.node)
    if node is None:
        return [_unknown_node(model, call.node, call.name_span or call.span, "a call")]
    out = []
    for dup, first in _first_dupes(call.reads, key=lambda b: b.port):
        out.append(
            _dup_bind(dup.span, first.span, f"input port `{dup.port}` of `{node.name}`", "read")
        )
    for dup, first in _first_dupes(call.writes, key=lambda b: b.port):
        out.append(
            _dup_bind(dup.span, first.span, f"output port `{dup.port}` of `{node.name}`", "bound")
        )
    for dup, first in _first_dupes(call.writes, key=lambda b: b.channel):
        if dup.port != first.port:  # same port twice is already reported above
            out.append(
                diag(
                    "WG112",
                    f"channel `{dup.channel}` is bound twice by one call",
                    dup.span,
                    label="bound again here",
                    labels=[Label(first.span, "first bound here")],
                    help="bind each output to its own channel: `-> a = p, b = q`",
                )
            )
    for b in call.reads:
        if node.input(b.port) is not None:
            continue
        if (declared := node.output(b.port)) is not None:
            out.append(
                diag(
                    "WG113",
                    f"`{b.port}` is an output port of `{node.name}`, not an input",
                    b.span,
                    label="output port passed as an argument",
                    labels=[Label(declared.span, "declared `out` here")],
                    help=f"bind outputs after `->`: `{node.name}(...) -> {b.port}`",
                )
            )
        else:
            out.append(_unknown_port(node, b.port, b.span, "input", node.inputs))
    for b in call.writes:
        if node.output(b.port) is not None:
            continue
        if (declared := node.input(b.port)) is not None:
            out.append(
                diag(
                    "WG113",
                    f"`{b.port}` is an input port of `{node.name}`, not an output",
                    b.span,
                    label="input port bound after `->`",
                    labels=[Label(declared.span, "declared `in` here")],
                    help=f"pass inputs as arguments: `{node.name}({b.port})`",
                )
            )
        else:
            out.append(_unknown_port(node, b.port, b.span, "output", node.outputs))
    return out


def _dup_bind(span: Span, first: Span, what: str, verb: str) -> Diagnostic:
    return diag(
        "WG112",
        f"{what} is {verb} twice in one call",
        span,
        label="again here",
        labels=[Label(first, "first here")],
        help="name each port once per call",
    )


def _unknown_port(node: Node, port: str, span: Span, kind: str, ports) -> Diagnostic:
    return diag(
        "WG103",
        f"node `{node.name}` has no {kind} port `{port}`",
        span,
        label=f"unknown {kind} port",
        labels=[Label(node.span, f"`{node.name}` declared here")],
        help=_unknown_help(
            port,
            (p.name for p in ports),
            f"its {kind} ports",
            f"declare `{'in' if kind == 'input' else 'out'} {port}: TYPE` in `{node.name}`",
        ),
    )


# ---------------------------------------------------------------- flows
def _flow(model: Model, f: Flow) -> list[Diagnostic]:
    out = []
    stream = f.on_stream if f.kind is FlowKind.ON_STREAM else None
    if stream is not None and model.stream(stream) is None:
        out.append(
            diag(
                "WG107",
                f"flow `{f.name}` runs on unknown stream `{stream}`",
                f.trigger_span or f.span,
                label="not a declared stream",
                help=_unknown_help(
                    stream,
                    (s.name for s in model.streams),
                    "streams",
                    "declare it with `stream NAME: PRODUCER.port -> CONSUMER.port`",
                ),
            )
        )
    if f.when is not None:
        out += _cond(model, f.when)
    if f.body is not None:
        out += _flow_body(model, f.body)
    return out


def _flow_body(model: Model, body: FBlock) -> list[Diagnostic]:
    out = []
    for s in iter_fstmts(body):
        if isinstance(s, WalkCall):
            if model.subflow(s.walk) is None or model.walk(s.walk) is not None:
                out += _walk_call(model, s)
        elif isinstance(s, FIf):
            out += _cond(model, s.cond)
        elif isinstance(s, OptionMatch):
            out += _option_name(model, s.option, s.span)
        elif isinstance(s, Repeat):
            out += _expr_names(model, s.count, "a `repeat` count")
    return out


def _cond(model: Model, cond) -> list[Diagnostic]:
    out = []
    for atom in cond_atoms(cond):
        if isinstance(atom, OptionCond | OptionCmp):
            out += _option_name(model, atom.name, atom.span)
        elif isinstance(atom, Placed) and model.node(atom.node) is None:
            out.append(_unknown_node(model, atom.node, atom.span, "`placed(...)`"))
    return out


def _walk_call(model: Model, c: WalkCall) -> list[Diagnostic]:
    out = []
    for a in c.args:
        if a.kind is ArgKind.OPTION:
            out += _option_name(model, a.name, a.span)
    for dup, first in _first_dupes(c.args, key=lambda a: a.param):
        out.append(
            diag(
                "WG112",
                f"argument `{dup.param}` is passed twice to walk `{c.walk}`",
                dup.span,
                label="again here",
                labels=[Label(first.span, "first passed here")],
                help="pass each walk input once",
            )
        )
    walk = model.walk(c.walk)
    if walk is None:
        out.append(
            diag(
                "WG106",
                f"unknown walk `{c.walk}`",
                c.span,
                label="not a declared walk",
                help=_unknown_help(
                    c.walk,
                    [*(w.name for w in model.walks), *(sub.name for sub in model.subflows)],
                    "walks and subflows",
                    "declare it with `walk ...` (or `subflow ...`)",
                ),
            )
        )
        return out
    for a in {a.param: a for a in reversed(c.args)}.values():  # each name once, first use
        if walk.input(a.param) is None:
            out.append(
                diag(
                    "WG114",
                    f"walk `{walk.name}` has no input `{a.param}`",
                    a.span,
                    label="unknown argument",
                    labels=[Label(walk.span, f"`{walk.name}` declared here")],
                    help=_unknown_help(
                        a.param,
                        (i.name for i in walk.inputs),
                        "its inputs",
                        f"declare it in `walk {walk.name}(...)`",
                    ),
                )
            )
    return out
