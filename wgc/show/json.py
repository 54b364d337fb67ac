"""`wgc show --format json`: the IR as a stable JSON document, the contract for tools.

Shape (``"version": 1``; bump it on any incompatible change): ``model``, ``file``, ``walk`` (the
`--walk` filter or null), then lists in source order: ``params``, ``types``, ``options``,
``nodes``, ``streams``, ``walks`` (inputs, the statement tree ``body``, ``calls``, ``loops``,
``edges``, ``issues``) and ``flows`` (statement trees, subflow calls expanded); ``subflows``
(their declarations) only when the model has any. An option has ``choices`` when it lists its
values, ``default_by`` and ``by_value`` when its default is per mode. Types are
``{"text", "dtype", "dims": [{"kind", "value", "name"}]}``; spans are ``"file:line:col"``.
Keys are sorted and the indent is 2, so the bytes are the same across runs and hash seeds.
"""

from __future__ import annotations

import json
from typing import Any

from wgc.ir.decls import Node, OptionDecl, Port, Stream
from wgc.ir.expr import render
from wgc.ir.flow import (
    Fail,
    FBlock,
    Flow,
    For,
    If,
    Match,
    OptionMatch,
    Repeat,
    Subflow,
    WalkCall,
)
from wgc.ir.model import Model
from wgc.ir.types import TensorType
from wgc.ir.walk import Block, Call, Edge, Emit, End, Loop, Par, Persist, Walk
from wgc.show import describe as d

VERSION = 1


def render_json(model: Model, walk: str | None = None) -> str:
    return json.dumps(to_dict(model, walk), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def to_dict(model: Model, walk: str | None = None) -> dict[str, Any]:
    """The document; with ``walk``, ``walks`` holds only that walk and ``flows`` is empty."""
    walks = [w for w in model.walks if walk is None or w.name == walk]
    doc: dict[str, Any] = {
        "version": VERSION,
        "model": model.name,
        "file": model.file,
        "walk": walk,
        "params": [
            {"name": p.name, "expr": render(p.expr), "value": p.value, "span": d.span_text(p.span)}
            for p in model.params
        ],
        "types": [
            {"name": t.name, "ref": t.ref, "type": _type(t.type), "span": d.span_text(t.span)}
            for t in model.types
        ],
        "options": [_option(o) for o in model.options],
        "nodes": [_node(n) for n in model.nodes],
        "streams": [_stream(s) for s in model.streams],
        "walks": [_walk(w) for w in walks],
        "flows": [] if walk is not None else [_flow(f) for f in model.flows],
    }
    if model.subflows and walk is None:
        doc["subflows"] = [_subflow(f) for f in model.subflows]
    return doc


def _option(o: OptionDecl) -> dict:
    out = {"name": o.name, "type": o.type, "default": o.default, "span": d.span_text(o.span)}
    if o.choices:
        out["choices"] = list(o.choices)
    if o.default_by is not None:
        out["default_by"] = o.default_by
        out["by_value"] = [list(kv) for kv in o.by_value]
    return out


def _type(t: TensorType | None) -> dict | None:
    if t is None:
        return None
    dims = [{"kind": x.kind.value, "value": x.value, "name": x.name} for x in t.dims]
    return {"text": str(t), "dtype": t.dtype.value, "dims": dims}


def _port(p: Port) -> dict:
    return {
        "name": p.name,
        "type": _type(p.type),
        "type_ref": p.type_ref,
        "span": d.span_text(p.span),
    }


def _node(n: Node) -> dict:
    return {
        "name": n.name,
        "engine": n.engine.value,
        "labels": list(n.labels),
        "like": n.like,
        "label": n.label,
        "impl": n.impl,
        "inputs": [_port(p) for p in n.inputs],
        "outputs": [_port(p) for p in n.outputs],
        "config": [{"name": k, "value": v} for k, v in n.config],
        "span": d.span_text(n.span),
    }


def _stream(s: Stream) -> dict:
    return {
        "name": s.name,
        "producer": {"node": s.producer.node, "port": s.producer.port},
        "consumer": {"node": s.consumer.node, "port": s.consumer.port},
        "policy": {
            "kind": s.policy.kind.value,
            "text": d.policy_text(s.policy),
            "args": [
                {"name": a.name, "expr": render(a.expr), "value": a.value} for a in s.policy.args
            ],
        },
        "final": s.final.value,
        "after_done": "continue" if s.after_done_continue else None,
        "span": d.span_text(s.span),
    }


# ---------------------------------------------------------------- walks
def _walk(w: Walk) -> dict:
    return {
        "name": w.name,
        "inputs": [
            {
                "name": i.name,
                "optional": i.optional,
                "type": _type(i.type),
                "type_ref": i.type_ref,
                "span": d.span_text(i.span),
            }
            for i in w.inputs
        ],
        "body": _block(w.body),
        "calls": [_call(c) for c in w.calls],
        "loops": [_loop(lp) for lp in w.loops],
        "edges": [_edge(e) for e in w.edges],
        "issues": [
            {
                "kind": i.kind.value,
                "channel": i.channel,
                "loop": i.loop,
                "reader": i.reader,
                "span": d.span_text(i.span),
            }
            for i in w.issues
        ],
        "span": d.span_text(w.span),
    }


def _binds(binds) -> list[dict]:
    return [{"port": b.port, "channel": b.channel} for b in binds]


def _call(c: Call) -> dict:
    return {
        "id": c.id,
        "node": c.node,
        "reads": _binds(c.reads),
        "writes": _binds(c.writes),
        "loops": list(c.loops),
        "span": d.span_text(c.span),
    }


def _loop(lp: Loop) -> dict:
    return {
        "name": lp.name,
        "max_expr": render(lp.max_expr),
        "max": lp.max,
        "until": lp.until.name if lp.until else None,
        "eager": lp.eager,
        "speculate": lp.speculate,
        "yield_last": [n.name for n in lp.yield_last],
        "yield_all": [n.name for n in lp.yield_all],
        "span": d.span_text(lp.span),
    }


def _block(b: Block) -> list[dict]:
    return [_stmt(s) for s in b.stmts]


def _stmt(s) -> dict:
    if isinstance(s, Call):
        return {"stmt": "call", "id": s.id}
    if isinstance(s, Emit):
        return {"stmt": "emit", "channel": s.channel, "modality": s.modality}
    if isinstance(s, Persist):
        return {"stmt": "persist", "channel": s.channel}
    if isinstance(s, Par):
        return {"stmt": "par", "branches": [_block(b) for b in s.branches]}
    assert isinstance(s, Loop)
    return {"stmt": "loop", "name": s.name, "body": _block(s.body)}


def _end(e: End) -> dict:
    return {"kind": e.kind.value, "call": e.call, "port": e.port, "name": e.name}


def _edge(e: Edge) -> dict:
    return {
        "kind": e.kind.value,
        "channel": e.channel,
        "src": _end(e.src),
        "dst": _end(e.dst),
        "loop": e.loop,
        "type": _type(e.type),
        "span": d.span_text(e.span),
    }


# ---------------------------------------------------------------- flows
def _flow(f: Flow) -> dict:
    return {
        "name": f.name,
        "kind": f.kind.value,
        "when": d.cond_text(f.when) if f.when is not None else None,
        "on_stream": f.on_stream,
        "extern": f.extern,
        "body": _fblock(f.body) if f.body is not None else None,
        "span": d.span_text(f.span),
    }


def _subflow(f: Subflow) -> dict:
    return {
        "name": f.name,
        "params": list(f.params),
        "called": f.called,
        "body": _fblock(f.body),
        "span": d.span_text(f.span),
    }


def _fblock(b: FBlock) -> list[dict]:
    return [_fstmt(s) for s in b.stmts]


def _fstmt(s) -> dict:
    if isinstance(s, WalkCall):
        args = [
            {"param": a.param, "kind": a.kind.value, "name": a.name, "attr": a.attr} for a in s.args
        ]
        return {"stmt": "walk", "walk": s.walk, "args": args, "span": d.span_text(s.span)}
    if isinstance(s, Fail):
        return {"stmt": "fail", "message": s.message}
    if isinstance(s, For):
        return {"stmt": "for", "var": s.var, "body": _fblock(s.body)}
    if isinstance(s, Repeat):
        return {"stmt": "repeat", "count": render(s.count), "body": _fblock(s.body)}
    if isinstance(s, Match):
        arms = [{"patterns": list(a.patterns), "body": _fblock(a.body)} for a in s.arms]
        return {"stmt": "match", "var": s.var, "arms": arms}
    if isinstance(s, OptionMatch):
        arms = [
            {"values": list(a.values), "default": a.default, "body": _fblock(a.body)}
            for a in s.arms
        ]
        return {"stmt": "match_option", "option": s.option, "arms": arms}
    assert isinstance(s, If)
    return {
        "stmt": "if",
        "cond": d.cond_text(s.cond),
        "then": _fblock(s.then),
        "else": _fblock(s.else_) if s.else_ is not None else None,
    }
