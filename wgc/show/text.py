"""`wgc show --format text`: a readable, deterministic dump of the whole IR.

Sections follow the source: params (with values), types, options, nodes, streams, walks,
subflows, flows (each flow with its subflow calls expanded).
A walk prints its statement tree as written (calls numbered by id, `par`, loops with their bound
and yields) and then the edges the compiler resolved, grouped by kind in `EdgeKind` order. Every
list comes from the IR's tuples, so the text is the same across runs and hash seeds.
"""

from __future__ import annotations

from wgc.ir.expr import render
from wgc.ir.flow import (
    Fail,
    FBlock,
    Flow,
    FlowKind,
    For,
    If,
    Match,
    OptionMatch,
    Repeat,
    WalkCall,
)
from wgc.ir.model import Model
from wgc.ir.walk import Block, Call, EdgeKind, Emit, Loop, Par, Persist, Walk
from wgc.show import describe as d

_IND = "  "


def render_text(model: Model, walk: str | None = None) -> str:
    """The dump of ``model``; with ``walk``, only that walk (which must exist)."""
    out: list[str] = [f"model {model.name}  # {model.file}"]
    if walk is not None:
        w = model.walk(walk)
        assert w is not None, walk
        out += ["", *walk_lines(w)]
        return "\n".join(out) + "\n"
    sections = [
        ("params", _params(model)),
        ("types", _types(model)),
        ("options", _options(model)),
        ("nodes", _nodes(model)),
        ("streams", _streams(model)),
    ]
    for title, lines in sections:
        if lines:
            out += ["", title, *lines]
    for w in model.walks:
        out += ["", *walk_lines(w)]
    for sf in model.subflows:  # flows print their calls expanded; the declarations follow
        out += ["", f"subflow {sf.name}({', '.join(sf.params)}) {{", *_fblock(sf.body, 1), "}"]
    for f in model.flows:
        out += ["", *flow_lines(f)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- declarations
def _params(m: Model) -> list[str]:
    return [f"{_IND}{p.name} = {d.expr_with_value(p.expr, p.value)}" for p in m.params]


def _types(m: Model) -> list[str]:
    out = []
    for t in m.types:
        text = d.type_text(t.type)
        if t.ref is not None:
            text = f"{t.ref} = {text}"
        out.append(f"{_IND}{t.name} = {text}")
    return out


def _options(m: Model) -> list[str]:
    return [f"{_IND}{d.option_text(o)}" for o in m.options]


def _nodes(m: Model) -> list[str]:
    out = []
    for n in m.nodes:
        out.append(f"{_IND}{n.name}: {d.engine_text(n)}")
        if n.impl is not None:
            out.append(f'{_IND * 2}impl "{n.impl}"')
        out += [f"{_IND * 2}in  {p.name}: {d.port_type(p)}" for p in n.inputs]
        out += [f"{_IND * 2}out {p.name}: {d.port_type(p)}" for p in n.outputs]
        out += [f"{_IND * 2}config {k} = {d.value(v)}" for k, v in n.config]
    return out


def _streams(m: Model) -> list[str]:
    out = []
    for s in m.streams:
        out.append(f"{_IND}{d.stream_header(s)}")
        out.append(f"{_IND * 2}chunk {d.policy_text(s.policy)}")
        out.append(f"{_IND * 2}final {s.final.value}")
        if s.after_done_continue:
            out.append(f"{_IND * 2}after_done continue")
    return out


# ---------------------------------------------------------------- walks
def walk_lines(w: Walk) -> list[str]:
    out = [f"walk {d.walk_signature(w)} {{"]
    out += _block(w.body, 1)
    out.append("}")
    out += _edges(w)
    if w.issues:
        out.append(f"{_IND}issues")
        for i in w.issues:
            out.append(f"{_IND * 2}{i.kind.value} {i.channel}: {i.reader or '?'}")
    return out


def _block(b: Block, depth: int) -> list[str]:
    out: list[str] = []
    for s in b.stmts:
        out += _stmt(s, depth)
    return out


def _stmt(s, depth: int) -> list[str]:
    pad = _IND * depth
    if isinstance(s, Call):
        return [pad + d.call_text(s)]
    if isinstance(s, Emit):
        return [f"{pad}emit {s.channel} as {s.modality}"]
    if isinstance(s, Persist):
        return [f"{pad}persist {s.channel}"]
    if isinstance(s, Par):
        out = [f"{pad}par {{"]
        for i, br in enumerate(s.branches):
            if len(br.stmts) == 1:
                out += _stmt(br.stmts[0], depth + 1)
            else:
                out.append(f"{pad}{_IND}{{  # branch {i}")
                out += _block(br, depth + 2)
                out.append(f"{pad}{_IND}}}")
        return [*out, pad + "}"]
    assert isinstance(s, Loop)
    close = "}"
    if s.yield_last or s.yield_all:
        close += " " + d.yields_text(s)
    return [f"{pad}{d.loop_header(s)} {{", *_block(s.body, depth + 1), pad + close]


def _edges(w: Walk) -> list[str]:
    out = [f"{_IND}edges"]
    for kind in EdgeKind:
        group = [e for e in w.edges if e.kind is kind]
        if not group:
            continue
        out.append(f"{_IND * 2}{kind.value}")
        for e in group:
            loop = f" [loop {e.loop}]" if e.loop else ""
            typ = f" : {e.type}" if e.type is not None else ""
            src, dst = d.end_text(w, e.src), d.end_text(w, e.dst)
            out.append(f"{_IND * 3}{e.channel}: {src} -> {dst}{loop}{typ}")
    return out if len(out) > 1 else [f"{_IND}edges (none)"]


# ---------------------------------------------------------------- flows
def flow_lines(f: Flow) -> list[str]:
    head = f"flow {f.name}"
    if f.kind is FlowKind.WHEN and f.when is not None:
        head += f" when {d.cond_text(f.when)}"
    elif f.kind is FlowKind.ON_STREAM:
        head += f" on {f.on_stream}"
    if f.kind is FlowKind.EXTERN or f.body is None:
        return [f'{head} = "{f.extern}"']
    return [f"{head} {{", *_fblock(f.body, 1), "}"]


def _fblock(b: FBlock, depth: int) -> list[str]:
    out: list[str] = []
    for s in b.stmts:
        out += _fstmt(s, depth)
    return out


def _fstmt(s, depth: int) -> list[str]:
    pad = _IND * depth
    if isinstance(s, WalkCall):
        return [f"{pad}{s.walk}({', '.join(d.farg_text(a) for a in s.args)})"]
    if isinstance(s, Fail):
        return [f"{pad}fail {d.value(s.message)}"]
    if isinstance(s, For):
        return [f"{pad}for {s.var} in request.inputs {{", *_fblock(s.body, depth + 1), pad + "}"]
    if isinstance(s, Repeat):
        head = f"{pad}repeat {render(s.count)} {{"
        return [head, *_fblock(s.body, depth + 1), pad + "}"]
    if isinstance(s, Match):
        out = [f"{pad}match {s.var}.modality {{"]
        for a in s.arms:
            head = f"{pad}{_IND}{' | '.join(a.patterns)} =>"
            if len(a.body.stmts) == 1 and isinstance(a.body.stmts[0], WalkCall | Fail):
                out.append(f"{head} {_fstmt(a.body.stmts[0], 0)[0]}")
                continue
            out += [f"{head} {{", *_fblock(a.body, depth + 2), f"{pad}{_IND}}}"]
        return [*out, pad + "}"]
    if isinstance(s, OptionMatch):
        out = [f"{pad}match option.{s.option} {{"]
        for a in s.arms:
            head = f"{pad}{_IND}{'_' if a.default else ' | '.join(map(d.value, a.values))} =>"
            if len(a.body.stmts) == 1 and isinstance(a.body.stmts[0], WalkCall | Fail):
                out.append(f"{head} {_fstmt(a.body.stmts[0], 0)[0]}")
                continue
            out += [f"{head} {{", *_fblock(a.body, depth + 2), f"{pad}{_IND}}}"]
        return [*out, pad + "}"]
    assert isinstance(s, If)
    out = [f"{pad}if {d.cond_text(s.cond)} {{", *_fblock(s.then, depth + 1)]
    if s.else_ is not None:
        out += [f"{pad}}} else {{", *_fblock(s.else_, depth + 1)]
    return [*out, pad + "}"]
