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

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.decls import Node, Stream
from wgc.ir.flow import (
    ArgKind,
    FBlock,
    Flow,
    FlowKind,
    For,
    OptionCmp,
    OptionCond,
    OptionMatch,
    ParamCmp,
    Placed,
    Repeat,
    WalkCall,
    cond_atoms,
    iter_fstmts,
)
from wgc.ir.flow import If as FIf
from wgc.ir.model import Model
from wgc.ir.walk import Call, Loop, Walk
from wgc.passes.name_decls import (
    first_dupes,
    impls,
    labels,
    like_bases,
    node_ports,
    type_aliases,
    type_name,
    unknown_help,
)

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
    bad_like = like_bases(model, out)
    out += labels(model, bad_like)
    out += impls(model, bad_like)
    out += node_ports(model)
    out += type_aliases(model)
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
        for dup, first in first_dupes(getattr(model, attr)):
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
        for dup, first in first_dupes(w.loops):
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
                help=unknown_help(
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
        help=unknown_help(
            name,
            (n.name for n in model.nodes),
            "nodes",
            f"declare it with `node {name}: stateless {{ ... }}`",
        ),
    )


# ---------------------------------------------------------------- walks
def _walk(model: Model, w: Walk, bad_like: set[str]) -> list[Diagnostic]:
    out = []
    for dup, first in first_dupes(w.inputs):
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
            out += type_name(model, inp.type_ref, inp.span, f"walk input `{inp.name}`")
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
    for dup, first in first_dupes(call.reads, key=lambda b: b.port):
        out.append(
            _dup_bind(dup.span, first.span, f"input port `{dup.port}` of `{node.name}`", "read")
        )
    for dup, first in first_dupes(call.writes, key=lambda b: b.port):
        out.append(
            _dup_bind(dup.span, first.span, f"output port `{dup.port}` of `{node.name}`", "bound")
        )
    for dup, first in first_dupes(call.writes, key=lambda b: b.channel):
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
        help=unknown_help(
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
                help=unknown_help(
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
        elif isinstance(atom, ParamCmp) and model.param(atom.name) is None:
            out.append(_unknown_cond_name(model, atom))
    return out


def _unknown_cond_name(model: Model, atom: ParamCmp) -> Diagnostic:
    """WG105 for a bare name in a condition that is no param, with the likely intent."""
    name = atom.name
    loop_vars = {
        s.var
        for f in model.flows
        if f.body is not None
        for s in iter_fstmts(f.body)
        if isinstance(s, For)
    }
    if name == "request":
        fix = (
            "test the request: `request.has(text)`, `request.wants(audio)`, "
            "`request.count(image) == 1`"
        )
    elif name in loop_vars:
        fix = (
            f"`{name}` is an input segment: pick by its modality with "
            f"`match {name}.modality {{ ... }}`"
        )
    else:
        fix = did_you_mean(name, [p.name for p in model.params]) or (
            f"declare it with `param {name} = VALUE`, or test an option (`option.{name}`)"
        )
    return diag(
        "WG105",
        f"unknown name `{name}` in a flow condition",
        atom.span,
        label="not a `param`",
        help=fix,
    )


def _walk_call(model: Model, c: WalkCall) -> list[Diagnostic]:
    out = []
    for a in c.args:
        if a.kind is ArgKind.OPTION:
            out += _option_name(model, a.name, a.span)
    for dup, first in first_dupes(c.args, key=lambda a: a.param):
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
                help=unknown_help(
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
                    help=unknown_help(
                        a.param,
                        (i.name for i in walk.inputs),
                        "its inputs",
                        f"declare it in `walk {walk.name}(...)`",
                    ),
                )
            )
    return out
