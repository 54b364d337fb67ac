"""Pass `loop_shape`: what a loop carries or calls has a static shape, and its bound is static.

A loop body is graph-captured once and replayed every iteration, so its buffers must have a
shape the compiler knows: every dim an integer, a `param`, or a shape bucket (a dim over
`option`s with a fixed set of values: the loop is captured once per bucket). Invariants proved:

* WG301: every loop-carried channel (its body binding, and the value iteration 0 reads) has a
  static shape. A walk input with no declared type takes the type of the port reading it.
* WG302: every port a call inside a loop uses (inputs it reads, outputs it binds, and stream
  consumer/producer ports of its node) has a static shape; one error per (call, port). A port
  already reported by WG301 (it binds or reads the dynamic carried channel) is not repeated.
* WG304: a loop marked `eager` (or nested inside an `eager` loop, which runs its whole body
  eagerly) does not need captured shapes: its WG301/WG302 findings become ONE warning for the
  outermost eager loop, listing every dynamic shape in notes.
* WG303: `max` is a static positive integer in the 64-bit range (`1e309`, an infinite float, is
  reported like any other bound that does not evaluate). Unknown names in it are WG105 (the
  names pass) and a param that failed to evaluate was reported where it is declared; both are
  skipped here.

Owns: WG301, WG302, WG303, WG304.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.ir import expr as E
from wgc.ir.model import Model
from wgc.ir.types import TensorType
from wgc.ir.walk import Block, Call, Edge, EdgeKind, EndKind, Loop, Par, Walk

NAME = "loop_shape"
CODES = ("WG301", "WG302", "WG303", "WG304")


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for walk in model.walks:
        out.extend(_check_walk(model, walk))
    return out


# ---------------------------------------------------------------------------------- findings


@dataclass(frozen=True, slots=True)
class _Finding:
    """One dynamic shape inside a loop, before it is known to be an error or an eager note."""

    loop: str  # the innermost loop it belongs to
    diagnostic: Diagnostic  # the error, should the loop be captured
    note: str  # its line in an eager loop's WG304 warning


def _check_walk(model: Model, walk: Walk) -> list[Diagnostic]:
    nesting = _loop_nesting(walk.body, ())
    out = [d for loop in walk.loops if (d := _check_max(model, loop)) is not None]
    carried, claimed = _carried_findings(model, walk)
    findings = carried + _port_findings(model, walk, claimed)
    eager: dict[str, list[_Finding]] = {}
    for f in findings:
        owner = _eager_owner(walk, nesting.get(f.loop, (f.loop,)))
        if owner is None:
            out.append(f.diagnostic)
        else:
            eager.setdefault(owner, []).append(f)
    for name, fs in eager.items():
        loop = walk.loop(name)
        if loop is not None:
            out.append(_eager_warning(loop, fs))
    return out


def _loop_nesting(block: Block, outer: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Loop name -> the names of the loops enclosing it and itself, outermost first."""
    out: dict[str, tuple[str, ...]] = {}
    for s in block.stmts:
        if isinstance(s, Loop):
            path = (*outer, s.name)
            out.setdefault(s.name, path)
            out.update({k: v for k, v in _loop_nesting(s.body, path).items() if k not in out})
        elif isinstance(s, Par):
            for b in s.branches:
                out.update({k: v for k, v in _loop_nesting(b, outer).items() if k not in out})
    return out


def _eager_owner(walk: Walk, path: tuple[str, ...]) -> str | None:
    """The outermost `eager` loop of ``path``: an eager loop runs its nested loops eagerly."""
    for name in path:
        loop = walk.loop(name)
        if loop is not None and loop.eager:
            return name
    return None


def _dynamic_dims(t: TensorType) -> str:
    return ", ".join(f"`{d}`" for d in t.dims if not d.is_bucket_static)


def _shape_help(loop: Loop, what: str, t: TensorType) -> str:
    pad = next((d for d in t.dims if not d.is_bucket_static), None)
    bound = f"`param {pad.name} = ...`" if pad is not None and pad.name else "a `param`"
    bucket = (
        f", or a shape bucket: `option {pad.name}: int in [...]` read as `option.{pad.name}`"
        if pad is not None and pad.name
        else ""
    )
    return (
        f"give {what} a static shape (every dim an integer or a `param`; e.g. pad to {bound}"
        f"{bucket}), or mark the loop `eager` (`loop {loop.name} max ... eager`) to run it "
        "without graph capture"
    )


def _header(loop: Loop, primary: Span, message: str) -> list[Label]:
    """A label on the loop header, unless the primary span already sits on that line."""
    header = loop.header_span or loop.span
    return [] if header.line == primary.line else [Label(header, message)]


# ---------------------------------------------------------------------------------- WG301


def _carried_findings(model: Model, walk: Walk) -> tuple[list[_Finding], set[tuple[int, str]]]:
    """WG301 per (loop, channel), and the (call, port) pairs it already covers."""
    groups: dict[tuple[str, str], list[Edge]] = {}
    for e in walk.edges:
        if e.kind in (EdgeKind.LOOP_CARRIED, EdgeKind.LOOP_INIT) and e.loop is not None:
            groups.setdefault((e.loop, e.channel), []).append(e)
    findings: list[_Finding] = []
    claimed: set[tuple[int, str]] = set()
    for (loop_name, channel), edges in groups.items():
        loop = walk.loop(loop_name)
        if loop is None:
            continue
        f = _carried_finding(model, walk, loop, channel, edges)
        if f is None:
            continue
        findings.append(f)
        for e in edges:  # both ends of the carried value: WG301 says it all
            for end in (e.src, e.dst):
                if end.kind is EndKind.CALL and end.call is not None and end.port is not None:
                    claimed.add((end.call, end.port))
    return findings, claimed


def _carried_finding(
    model: Model, walk: Walk, loop: Loop, channel: str, edges: list[Edge]
) -> _Finding | None:
    carries = f"loop `{loop.name}` carries `{channel}`"
    for e in edges:  # the body's binding first: it is what every later iteration reads
        if e.kind is EdgeKind.LOOP_CARRIED and e.type is not None and not e.type.is_bucket_static:
            span = _write_span(walk, e) or e.span
            label = f"bound here as `{e.type}`, read by the next iteration"
            return _carried(loop, channel, e.type, span, label, _header(loop, span, carries))
    for e in edges:
        if e.kind is not EdgeKind.LOOP_INIT:
            continue
        t = e.type if e.type is not None else _reader_type(model, walk, e)
        if t is None or t.is_bucket_static:
            continue
        labels = _header(loop, e.span, carries)
        first = _write_span(walk, e) if e.src.kind is EndKind.CALL else None
        if e.src.kind is EndKind.INPUT:
            inp = walk.input(e.src.name or "")
            first = inp.span if inp is not None else None
        if first is not None:
            labels.append(Label(first, f"its first value is `{t}`"))
        label = f"iteration 0 reads a `{t}` value here"
        return _carried(loop, channel, t, e.span, label, labels)
    return None


def _carried(
    loop: Loop, channel: str, t: TensorType, span: Span, label: str, labels: list[Label]
) -> _Finding:
    d = diag(
        "WG301",
        f"loop-carried channel `{channel}` has a dynamic shape `{t}`",
        span,
        label=label,
        labels=labels,
        help=_shape_help(loop, f"`{channel}`", t),
        notes=[
            f"loop `{loop.name}` keeps `{channel}` in a fixed buffer from one iteration to the "
            f"next; {_dynamic_dims(t)} can change per request"
        ],
    )
    return _Finding(loop.name, d, f"loop-carried channel `{channel}` is `{t}`")


def _reader_type(model: Model, walk: Walk, e: Edge) -> TensorType | None:
    """A walk input with no declared type has the type of the port that reads it."""
    if e.src.kind is not EndKind.INPUT or e.dst.kind is not EndKind.CALL:
        return None
    if e.dst.call is None or e.dst.call >= len(walk.calls):
        return None
    node = model.node(walk.calls[e.dst.call].node)
    port = node.input(e.dst.port or "") if node is not None else None
    return port.type if port is not None else None


def _write_span(walk: Walk, e: Edge) -> Span | None:
    """The `-> channel = port` binding that produced ``e``'s value."""
    if e.src.kind is not EndKind.CALL or e.src.call is None or e.src.call >= len(walk.calls):
        return None
    call = walk.calls[e.src.call]
    for w in call.writes:
        if w.port == e.src.port and w.channel == e.channel:
            return w.span
    return next((w.span for w in call.writes if w.port == e.src.port), None)


# ---------------------------------------------------------------------------------- WG302


def _port_findings(model: Model, walk: Walk, claimed: set[tuple[int, str]]) -> list[_Finding]:
    streamed = _streamed_ports(walk)
    findings: list[_Finding] = []
    for call in walk.calls:
        if not call.loops:
            continue
        loop = walk.loop(call.loops[-1])
        node = model.node(call.node)
        if loop is None or node is None:
            continue
        seen: set[str] = set()
        uses = [(b.port, "in", b.span) for b in call.reads]
        uses += [(b.port, "out", b.span) for b in call.writes]
        uses += [(p, d, call.name_span or call.span) for p, d in streamed.get(call.id, [])]
        for port_name, direction, span in uses:
            if port_name in seen or (call.id, port_name) in claimed:
                continue
            seen.add(port_name)
            port = node.input(port_name) if direction == "in" else node.output(port_name)
            if port is None or port.type is None or port.type.is_bucket_static:
                continue  # unknown ports are the names pass's; None types the builder's
            findings.append(_port_finding(call, loop, port_name, port.type, port.span, span))
    return findings


def _streamed_ports(walk: Walk) -> dict[int, list[tuple[str, str]]]:
    """Call id -> (port, direction) of the stream endpoints that call feeds or drains."""
    out: dict[int, list[tuple[str, str]]] = {}
    for e in walk.edges:
        if e.kind is not EdgeKind.STREAMED:
            continue
        if e.dst.kind is EndKind.CALL and e.dst.call is not None and e.dst.port is not None:
            out.setdefault(e.dst.call, []).append((e.dst.port, "in"))
        if e.src.kind is EndKind.CALL and e.src.call is not None and e.src.port is not None:
            out.setdefault(e.src.call, []).append((e.src.port, "out"))
    return out


def _port_finding(
    call: Call, loop: Loop, port: str, t: TensorType, decl: Span, span: Span
) -> _Finding:
    d = diag(
        "WG302",
        f"port `{port}` of `{call.node}` has a dynamic shape `{t}`, "
        f"but `{call.node}` is called in loop `{loop.name}`",
        span,
        label=f"`{port}` is used inside loop `{loop.name}`",
        labels=[
            Label(decl, f"declared here with {_dynamic_dims(t)}"),
            *_header(loop, span, "this loop is graph-captured"),
        ],
        help=_shape_help(loop, f"port `{call.node}.{port}`", t),
    )
    line = f" (line {call.span.line})" if call.span.line else ""
    return _Finding(loop.name, d, f"port `{port}` of `{call.node}`{line} is `{t}`")


# ---------------------------------------------------------------------------------- WG304


def _eager_warning(loop: Loop, findings: list[_Finding]) -> Diagnostic:
    return diag(
        "WG304",
        f"loop `{loop.name}` is `eager` and has dynamic shapes: it will not be graph-captured",
        loop.header_span or loop.span,
        label="runs eagerly, one kernel launch at a time",
        help="this is fine for a short or rarely used loop; to capture it, make the shapes "
        "below static (integers or `param`s) and drop `eager`",
        notes=[f.note for f in findings],
    )


# ---------------------------------------------------------------------------------- WG303


def _check_max(model: Model, loop: Loop) -> Diagnostic | None:
    if loop.max is not None:
        return None
    ex = loop.max_expr
    for r in E.refs(ex):
        p = model.param(r.name)
        if p is None or p.value is None:
            return None  # WG105 (names pass) or the param's own error
    bound_of = f"bound of loop `{loop.name}`"
    opts = E.option_refs(ex)
    if opts:
        return diag(
            "WG303",
            f"loop bound uses `option.{opts[0].name}`, which is only known per request",
            opts[0].span,
            label="per-request value",
            labels=_header(loop, opts[0].span, bound_of),
            help=f"bound the loop by a compile-time `param` (e.g. `param max_{loop.name} = 64`, "
            f"then `max max_{loop.name}`) and stop it early with `until STOP`, a `bool[]` "
            f"channel the body sets from `option.{opts[0].name}`",
            notes=[
                "`max` sizes the loop's buffers and graph captures, so the compiler must know it"
            ],
        )
    try:
        value = E.evaluate(ex, model.param_values())
    except E.EvalError as err:
        return diag(
            "WG303",
            f"loop bound is not a static integer: {err.message}",
            err.span,
            label="cannot be evaluated",
            labels=_header(loop, err.span, bound_of),
            help=err.help or "`max` must evaluate to a positive integer",
        )
    return _bad_value(loop, value, _header(loop, ex.span, bound_of))


def _bad_value(loop: Loop, value: E.Value, header: list[Label]) -> Diagnostic:
    span = loop.max_expr.span
    shown = E.render(E.Lit(value, span))
    if isinstance(value, bool | str):
        message = f"loop bound must be an integer, found `{shown}`"
        fix = "`max` takes a positive integer expression of literals and `param`s"
    elif isinstance(value, float):
        message = f"loop bound `{shown}` is not an integer"
        fix = f"write a whole number of iterations, e.g. `max {max(1, int(value))}`"
    else:
        message = f"loop bound must be positive, but it is `{shown}`"
        fix = "`max` is the most iterations the loop may run: give it a value of at least 1"
    return diag(
        "WG303",
        message,
        span,
        label=f"evaluates to `{shown}`",
        labels=header,
        help=fix,
    )
