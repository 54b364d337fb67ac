"""Short, deterministic text for IR pieces, shared by every `wgc show` format.

Everything here is a pure function of the IR value it is given: no dict or set iteration order,
no object identities, so the output is the same across runs and hash seeds.
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Span
from wgc.ir.decls import ChunkPolicy, Node, OptionDecl, Port, Stream
from wgc.ir.expr import Expr, Lit, Value, render
from wgc.ir.flow import (
    ArgKind,
    BoolOp,
    Cond,
    Const,
    CountCmp,
    FArg,
    Not,
    OptionCmp,
    OptionCond,
    ParamCmp,
    Placed,
    RequestPred,
)
from wgc.ir.model import Model
from wgc.ir.types import TensorType
from wgc.ir.walk import Call, End, EndKind, Loop, Walk, WalkInput


def value(v: Value | None) -> str:
    """A compile-time value in source spelling (`true`, `"s"`, `4.0`); `?` when unknown."""
    if v is None:
        return "?"
    return render(Lit(v, _NOWHERE))


def expr_with_value(expr: Expr, v: Value | None) -> str:
    """``steps - 1 = 49``: the expression, and its value when that says something more."""
    text = render(expr)
    shown = value(v)
    return text if v is None or text == shown else f"{text} = {shown}"


def type_text(t: TensorType | None, ref: str | None = None) -> str:
    """``Latent`` or ``f32[16, 16]``; ``?`` for a type that did not resolve."""
    if ref is not None:
        return ref
    return "?" if t is None else str(t)


def port_type(p: Port) -> str:
    if p.type_ref is not None and p.type is not None:
        return f"{p.type_ref} = {p.type}"
    return type_text(p.type, p.type_ref)


def engine_text(n: Node) -> str:
    text = n.engine.value
    if n.labels and n.like is None:
        text += f"(labels = [{', '.join(n.labels)}])"
    if n.like is not None:
        text += f" like {n.like}"
    if n.label is not None:
        text += f", label {n.label}"
    return text


def policy_text(p: ChunkPolicy, compact: bool = False) -> str:
    """``sliding(window = 28, stride = 7)``, or ``sliding(28, 7)`` when ``compact``."""
    parts = []
    for a in p.args:
        v = value(a.value) if a.value is not None else render(a.expr)
        parts.append(v if compact or a.name is None else f"{a.name} = {v}")
    return f"{p.kind.value}({', '.join(parts)})"


def stream_header(s: Stream) -> str:
    return f"{s.name}: {s.producer} -> {s.consumer}"


def walk_input(i: WalkInput) -> str:
    opt = "?" if i.optional else ""
    typ = f": {type_text(i.type, i.type_ref)}" if i.type is not None or i.type_ref else ""
    return f"{i.name}{opt}{typ}"


def walk_signature(w: Walk) -> str:
    return f"{w.name}({', '.join(walk_input(i) for i in w.inputs)})"


def call_text(c: Call) -> str:
    """``#3 LLM(latents <- latents, t <- time_index) -> v_main = velocity``."""
    reads = ", ".join(f"{b.port} <- {b.channel}" for b in c.reads)
    text = f"#{c.id} {c.node}({reads})"
    if c.writes:
        text += " -> " + ", ".join(f"{b.channel} = {b.port}" for b in c.writes)
    return text


def loop_header(lp: Loop, compact: bool = False) -> str:
    """``loop denoise max steps - 1 = 49 until stop``; ``compact`` shows only the bound's value."""
    bound = (
        value(lp.max) if compact and lp.max is not None else expr_with_value(lp.max_expr, lp.max)
    )
    text = f"loop {lp.name} max {bound}"
    if lp.until is not None:
        text += f" until {lp.until.name}"
    if lp.eager:
        text += " eager"
    if not lp.speculate:
        text += " nospeculate"
    return text


def yields_text(lp: Loop) -> str:
    parts = []
    if lp.yield_last:
        parts.append("yield last " + ", ".join(n.name for n in lp.yield_last))
    if lp.yield_all:
        parts.append("yield all " + ", ".join(n.name for n in lp.yield_all))
    return " ".join(parts)


def end_text(w: Walk, e: End) -> str:
    """``#4 combine_cfg.latents``, ``input latents``, ``client text``, ``stream codes``..."""
    if e.kind is EndKind.CALL:
        node = w.calls[e.call].node if e.call is not None and e.call < len(w.calls) else "?"
        return f"#{e.call} {node}.{e.port}"
    if e.kind is EndKind.UNTIL:
        return f"until of loop {e.name}"
    if e.kind is EndKind.PERSIST:
        return f"persisted {e.name}"
    return f"{e.kind.value} {e.name}"


def cond_text(c: Cond, outer: int = 0) -> str:
    """A flow condition in source spelling, parenthesized only where precedence needs it."""
    if isinstance(c, RequestPred):
        return f"request.{c.pred}({c.modality})"
    if isinstance(c, OptionCond):
        return f"option.{c.name}"
    if isinstance(c, OptionCmp):
        return f"option.{c.name} {c.op} {value(c.value)}"
    if isinstance(c, CountCmp):
        return f"request.count({c.modality}) {c.op} {'?' if c.value is None else c.value}"
    if isinstance(c, Placed):
        return f"placed({c.node})"
    if isinstance(c, ParamCmp):
        return c.name if c.op is None else f"{c.name} {c.op} {value(c.value)}"
    if isinstance(c, Const):
        return "true" if c.value else "false"
    if isinstance(c, Not):
        return "not " + cond_text(c.operand, 3)
    assert isinstance(c, BoolOp)
    prec = 1 if c.op == "or" else 2
    # left-associative in the grammar: a right operand of equal precedence needs parentheses
    left, right = cond_text(c.left, prec), cond_text(c.right, prec + 1)
    if c.op == "or":  # `a or (b and c)`: clearer for the reader, though `and` binds tighter
        left, right = _paren_and(c.left, left), _paren_and(c.right, right)
    text = f"{left} {c.op} {right}"
    return f"({text})" if prec < outer else text


def _paren_and(c: Cond, text: str) -> str:
    return f"({text})" if isinstance(c, BoolOp) and c.op == "and" and text[0] != "(" else text


def farg_text(a: FArg) -> str:
    if a.kind is ArgKind.OPTION:
        rhs = f"option.{a.name}"
    elif a.kind is ArgKind.SEGMENT_FIELD:
        rhs = f"{a.name}.{a.attr}"
    elif a.kind is ArgKind.FIRST:
        rhs = f"request.first({a.name})"
    else:
        rhs = a.name
    return a.param if rhs == a.param else f"{a.param} = {rhs}"


def option_text(o: OptionDecl) -> str:
    """``mode: str in ["t2v", "i2v"] = "t2v"``, or a per-mode default as its `match`."""
    head = f"{o.name}: {o.type}"
    if o.choices:
        head += " in [" + ", ".join(value(v) for v in o.choices) + "]"
    if o.default_by is None:
        return f"{head} = {value(o.default)}"
    arms = [f"{value(k)} => {value(v)}" for k, v in o.by_value] + [f"_ => {value(o.default)}"]
    return f"{head} = match option.{o.default_by} {{ {', '.join(arms)} }}"


def span_text(span: Span | None) -> str | None:
    return None if span is None else f"{span.file}:{span.line}:{span.col}"


def node_title(model: Model, name: str) -> str:
    """Hover text for a node: engine, impl and ports."""
    n = model.node(name)
    if n is None:
        return f"{name} (undeclared node)"
    lines = [f"{n.name}: {engine_text(n)}"]
    if n.impl:
        lines.append(f"impl {n.impl}")
    lines += [f"in  {p.name}: {port_type(p)}" for p in n.inputs]
    lines += [f"out {p.name}: {port_type(p)}" for p in n.outputs]
    return "\n".join(lines)


_NOWHERE = Span("<show>", 0, 0, 0, 0)
