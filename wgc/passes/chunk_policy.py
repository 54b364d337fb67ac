"""Pass `chunk_policy`: every stream delivers what its consumer port declares.

A stream `S: P.out -> C.in chunk POLICY final MODE [after_done continue]` concatenates the items
the producer port binds on dim 0 of the producer's port type (a scalar item stacks on a new
dim 0). A full chunk holds `n` items: `k` for `fixed(k)`, `W` for `sliding(window = W, ...)`,
`C + L` for `left_context(chunk = C, left = L)`.

Invariants proved (and codes owned):

- WG501: policy parameters are in range: `k >= 1`; `1 <= stride <= window`; `chunk >= 1`,
  `left >= 0`.
- WG502: a policy gets exactly its parameters (named or positional, per `POLICY_PARAMS`): none
  unknown, missing, duplicated or extra, each a compile-time integer.
- WG503: a consumer port with a static leading dim takes exactly `n * d0` rows, where `d0` is
  the producer's static leading dim. A symbolic or `?` consumer leading dim accepts any length.
- WG504: the consumer has the producer's dtype, rank and trailing dims.
- WG505: a consumer with a static leading dim never receives a short chunk. Under
  `final partial` (the default) the final chunk is the residual or, when there is none, an
  empty one (0 rows), so it is always possibly short; `left_context`'s first chunk is short when
  `left > 0` unless `final pad`. Fix: `final pad` (or `final drop` where only the end is short).
- WG506: a stream runs from an `out` port to an `in` port.
- WG507: a consumer port is fed by one stream, and no call also binds it from a channel.
- WG508: `after_done continue` (empty chunks) needs `final pad` or a non-static consumer leading
  dim.

Unknown nodes and ports are the `names` pass's job; a stream that mentions one is skipped here.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.decls import (
    POLICY_PARAMS,
    ChunkPolicy,
    FinalMode,
    PolicyArg,
    PolicyKind,
    Port,
    PortDir,
    Stream,
)
from wgc.ir.model import Model
from wgc.ir.types import Dim, TensorType

NAME = "chunk_policy"
CODES: tuple[str, ...] = (
    "WG501",
    "WG502",
    "WG503",
    "WG504",
    "WG505",
    "WG506",
    "WG507",
    "WG508",
)

_SIGNATURES = {
    PolicyKind.FIXED: "fixed(k)",
    PolicyKind.SLIDING: "sliding(window = W, stride = S)",
    PolicyKind.LEFT_CONTEXT: "left_context(chunk = C, left = L)",
}


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for s in model.streams:
        out.extend(_check_stream(model, s))
    out.extend(_fed_twice(model))
    return out


# ---------------------------------------------------------------------------------- params


@dataclass(frozen=True, slots=True)
class _Params:
    """A policy's parameter values by name, and the argument that gave each one."""

    values: dict[str, int]
    args: dict[str, PolicyArg]


def policy_params(model: Model, policy: ChunkPolicy) -> tuple[_Params | None, list[Diagnostic]]:
    """The policy's parameters when they are complete and valid, plus WG501/WG502 findings."""
    names = POLICY_PARAMS[policy.kind]
    diags: list[Diagnostic] = []
    args: dict[str, PolicyArg] = {}
    ok = True
    misnamed = False
    for i, a in enumerate(policy.args):
        name = a.name if a.name is not None else (names[i] if i < len(names) else None)
        problem = _arg_problem(policy, a, name, args)
        if problem is not None:
            diags.append(problem)
            ok = False
            misnamed |= name is not None  # unknown or repeated: probably meant a missing one
            continue
        assert name is not None
        args[name] = a
        if a.value is None:
            if (bad := _value_problem(model, policy, a, name)) is not None:
                diags.append(bad)
            ok = False
    missing = [n for n in names if n not in args]
    if missing and not misnamed:  # a misspelt or repeated name already explains it
        diags.append(_missing(policy, missing))
        ok = False
    if not ok:
        return None, diags
    values = {n: a.value for n, a in args.items() if a.value is not None}
    assert len(values) == len(args)  # an argument without a value is not `ok`
    params = _Params(values, args)
    diags.extend(_range_problems(policy, params))
    return (params if not diags else None), diags


def _arg_problem(
    policy: ChunkPolicy, a: PolicyArg, name: str | None, seen: dict[str, PolicyArg]
) -> Diagnostic | None:
    names = POLICY_PARAMS[policy.kind]
    sig = _SIGNATURES[policy.kind]
    kind = policy.kind.value
    if name is None:
        return diag(
            "WG502",
            f"too many parameters for `{kind}`: it takes {len(names)}",
            a.span,
            label="extra parameter",
            help=f"write `{sig}`",
        )
    if name not in names:
        hint = did_you_mean(name, names, end=" ")
        return diag(
            "WG502",
            f"`{kind}` has no parameter `{name}`",
            a.span,
            label="unknown parameter",
            help=f"{hint}write `{sig}`",
        )
    if name in seen:
        return diag(
            "WG502",
            f"parameter `{name}` of `{kind}` is given twice",
            a.span,
            label="given again here",
            labels=[Label(seen[name].span, "first given here")],
            help=f"give each parameter once: `{sig}`",
        )
    return None


def _value_problem(model: Model, policy: ChunkPolicy, a: PolicyArg, name: str) -> Diagnostic | None:
    """Why argument ``a`` has no integer value, or None when the builder already said why."""
    params = model.param_values()
    if E.is_static(a.expr, params):
        try:
            v = E.evaluate(a.expr, params)
        except E.EvalError:
            return None  # the builder reported the evaluation error (WG203/WG105)
        return diag(
            "WG502",
            f"parameter `{name}` of `{policy.kind.value}` must be an integer, found `{v!r}`",
            a.span,
            label="not an integer",
            help=f"give `{name}` an integer value",
        )
    unknown = [r.name for r in E.refs(a.expr) if r.name not in params]
    if any(model.param(n) is not None for n in unknown):
        return None  # a declared param whose value failed: reported where it is declared
    opts = [o.name for o in E.option_refs(a.expr)]
    why = (
        f"`option.{opts[0]}` is only known per request"
        if opts
        else f"`{unknown[0]}` is not a `param`"
        if unknown
        else "it is not static"
    )
    return diag(
        "WG502",
        f"parameter `{name}` of `{policy.kind.value}` must be a compile-time integer",
        a.span,
        label=why,
        help="use an integer literal or a `param` (chunk sizes fix the consumer's buffer shape)",
    )


def _missing(policy: ChunkPolicy, missing: list[str]) -> Diagnostic:
    kind = policy.kind.value
    which = ", ".join(f"`{m}`" for m in missing)
    noun = "parameter" if len(missing) == 1 else "parameters"
    return diag(
        "WG502",
        f"`{kind}` is missing {noun} {which}",
        policy.span,
        label=f"missing {which}",
        help=f"write `{_SIGNATURES[policy.kind]}`",
    )


def _range_problems(policy: ChunkPolicy, p: _Params) -> list[Diagnostic]:
    v, a = p.values, p.args
    out: list[Diagnostic] = []

    def at_least(name: str, low: int, why: str) -> None:
        if v[name] < low:
            out.append(
                diag(
                    "WG501",
                    f"`{name}` of `{policy.kind.value}` must be at least {low}, found {v[name]}",
                    a[name].span,
                    label=f"must be >= {low}",
                    help=why,
                )
            )

    if policy.kind is PolicyKind.FIXED:
        at_least("k", 1, "a chunk holds `k` items; use `fixed(k = 1)` to pass items one by one")
    elif policy.kind is PolicyKind.SLIDING:
        at_least("window", 1, "a window holds at least one item")
        at_least("stride", 1, "a window must advance; use `stride = 1` for the densest windows")
        if not out and v["stride"] > v["window"]:
            out.append(
                diag(
                    "WG501",
                    f"`stride` ({v['stride']}) is larger than `window` ({v['window']}): "
                    f"{v['stride'] - v['window']} items of every stride would never be delivered",
                    a["stride"].span,
                    label=f"must be <= {v['window']}",
                    labels=[Label(a["window"].span, "the window")],
                    help="make `stride <= window`; for non-overlapping chunks write "
                    f"`fixed(k = {v['window']})`",
                )
            )
    else:
        at_least("chunk", 1, "each chunk brings at least one new item")
        at_least("left", 0, "`left` counts old items kept as context; `left = 0` keeps none")
    return out


def chunk_items(policy: ChunkPolicy, values: dict[str, int]) -> int:
    """Items in a full chunk of ``policy``."""
    if policy.kind is PolicyKind.FIXED:
        return values["k"]
    if policy.kind is PolicyKind.SLIDING:
        return values["window"]
    return values["chunk"] + values["left"]


def short_chunks(policy: ChunkPolicy, values: dict[str, int], final: FinalMode) -> list[str]:
    """Why the consumer of ``policy`` with ``final`` can see a chunk shorter than a full one."""
    if final is FinalMode.PAD:
        return []
    why = []
    step = (
        values["chunk"] if policy.kind is PolicyKind.LEFT_CONTEXT else chunk_items(policy, values)
    )
    if final is FinalMode.PARTIAL:
        # the final chunk is the residual, or an empty one (0 rows) when nothing is left over
        why.append(
            "the final chunk is the short residual, or empty when nothing is left over "
            "(`final partial`)"
            if step > 1
            else "the final chunk is empty: 0 rows (`final partial`)"
        )
    if policy.kind is PolicyKind.LEFT_CONTEXT and values["left"] > 0:
        c = values["chunk"]
        why.append(f"the first chunk has only {c} items (no left context yet)")
    return why


# ---------------------------------------------------------------------------------- streams


def _check_stream(model: Model, s: Stream) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if not s.policy_valid:
        return out  # the unknown policy is reported (WG006); nothing to check it against
    params, found = policy_params(model, s.policy)
    out.extend(found)
    prod, cons = _endpoint(model, s, producer=True), _endpoint(model, s, producer=False)
    direction = _direction_problems(s, prod, cons)
    out.extend(direction)
    if direction or prod is None or cons is None or prod.type is None or cons.type is None:
        return out
    out.extend(_item_type(s, prod, cons))
    if not _static_leading(cons.type):
        return out  # a symbolic or `?` leading dim takes chunks of any length, even empty ones
    out.extend(_after_done(s, cons))
    if params is not None:
        out.extend(_leading_dim(s, params, prod, cons))
        out.extend(_short_chunk(s, params, cons))
    return out


def _endpoint(model: Model, s: Stream, producer: bool) -> Port | None:
    ref = s.producer if producer else s.consumer
    node = model.node(ref.node)
    return node.port(ref.port) if node else None


def _static_leading(t: TensorType) -> bool:
    return t.rank > 0 and t.dims[0].is_static


def _direction_problems(s: Stream, prod: Port | None, cons: Port | None) -> list[Diagnostic]:
    out = []
    swapped = (
        prod is not None
        and cons is not None
        and prod.direction is PortDir.IN
        and cons.direction is PortDir.OUT
    )
    swap = (
        f"; did you swap them? write `stream {s.name}: {s.consumer} -> {s.producer}`"
        if swapped
        else ""
    )
    if prod is not None and prod.direction is not PortDir.OUT:
        out.append(
            diag(
                "WG506",
                f"stream `{s.name}` is produced by `{s.producer}`, an `in` port",
                s.producer.span,
                label="an `in` port",
                labels=[Label(prod.span, "declared `in` here")],
                help="a stream runs from a node's `out` port to another node's `in` port" + swap,
            )
        )
    if cons is not None and cons.direction is not PortDir.IN:
        out.append(
            diag(
                "WG506",
                f"stream `{s.name}` feeds `{s.consumer}`, an `out` port",
                s.consumer.span,
                label="an `out` port",
                labels=[Label(cons.span, "declared `out` here")],
                help="a stream runs from a node's `out` port to another node's `in` port" + swap,
            )
        )
    return out


def _item_type(s: Stream, prod: Port, cons: Port) -> list[Diagnostic]:
    p, c = prod.type, cons.type
    assert p is not None and c is not None
    want_rank = max(p.rank, 1)  # scalar items stack on a new leading dim
    trailing = p.dims[1:]
    reasons = []
    if p.dtype is not c.dtype:
        reasons.append(f"dtype `{c.dtype.value}` instead of `{p.dtype.value}`")
    if c.rank != want_rank:
        reasons.append(f"rank {c.rank} instead of {want_rank}")
    elif not all(a.agrees(b) for a, b in zip(c.dims[1:], trailing, strict=True)):
        got = ", ".join(str(d) for d in c.dims[1:])
        want = ", ".join(str(d) for d in trailing)
        reasons.append(f"trailing dims [{got}] instead of [{want}]")
    if not reasons:
        return []
    return [
        diag(
            "WG504",
            f"consumer `{s.consumer}: {c}` does not take the items of `{s.producer}: {p}`",
            s.consumer.span,
            label="; ".join(reasons),
            labels=[
                Label(prod.span, f"items are `{p}`"),
                Label(cons.span, f"declared `{c}` here"),
            ],
            help=f"declare `{cons.name}: {_expected_hint(p, c)}` (a chunk stacks items on dim 0)",
        )
    ]


def _expected_hint(p: TensorType, c: TensorType) -> str:
    """The consumer type to suggest: the producer's, keeping the consumer's own leading dim."""
    lead = c.dims[0] if c.rank > 0 else Dim.sym("N")
    trailing = p.dims[1:]
    return str(TensorType(p.dtype, (lead, *trailing)))


def _leading_dim(s: Stream, params: _Params, prod: Port, cons: Port) -> list[Diagnostic]:
    p, c = prod.type, cons.type
    assert p is not None and c is not None
    n = chunk_items(s.policy, params.values)
    got = c.dims[0].value
    policy_text = _policy_text(s.policy, params)
    if p.rank > 0 and not p.dims[0].is_static:
        return [
            diag(
                "WG503",
                f"consumer `{s.consumer}` has a static leading dim, but chunks of `{s.producer}` "
                "have no static length",
                s.consumer.span,
                label=f"takes exactly {got} rows",
                labels=[Label(prod.span, f"each item has `{p.dims[0]}` rows")],
                notes=[
                    f"the producer's leading dim `{p.dims[0]}` varies per request, so a chunk's "
                    "length is only known at run time"
                ],
                help=f"give `{s.consumer}` a symbolic leading dim, e.g. "
                f"`{cons.name}: {TensorType(c.dtype, (Dim.sym('N'), *c.dims[1:]))}`",
            )
        ]
    d0 = p.dims[0].value if p.rank > 0 else 1
    assert d0 is not None  # a dynamic leading dim returned above
    want = n * d0
    if got == want:
        return []
    rows = f"{n} items of `{p}`" + (f" = {want} rows" if d0 != 1 else "")
    fixed = TensorType(c.dtype, (Dim.int_(want), *c.dims[1:]))
    return [
        diag(
            "WG503",
            f"consumer `{s.consumer}` takes {got} rows per chunk, but `{policy_text}` "
            f"delivers {want}",
            s.consumer.span,
            label=f"takes {got} rows",
            labels=[
                Label(s.policy.span, f"delivers {rows}"),
                Label(cons.span, f"declared `{c}` here"),
            ],
            help=f"declare `{cons.name}: {fixed}`, or change the policy so a full chunk has "
            f"{got} rows",
        )
    ]


def _policy_text(policy: ChunkPolicy, params: _Params) -> str:
    names = POLICY_PARAMS[policy.kind]
    inner = ", ".join(f"{n} = {params.values[n]}" for n in names)
    return f"{policy.kind.value}({inner})"


def _short_chunk(s: Stream, params: _Params, cons: Port) -> list[Diagnostic]:
    why = short_chunks(s.policy, params.values, s.final)
    if not why:
        return []
    c = cons.type
    assert c is not None
    span = s.final_span or s.policy.span
    if s.final is FinalMode.DROP:
        label = "drops the short residual, but does not pad the short first chunk"
    elif s.final_span is not None:
        label = "emits short chunks as they are"
    else:
        label = "can deliver a short chunk (`final partial` is the default)"
    sym = TensorType(c.dtype, (Dim.sym("N"), *c.dims[1:]))
    return [
        diag(
            "WG505",
            f"consumer `{s.consumer}` has a static leading dim ({c.dims[0]}), but stream "
            f"`{s.name}` can deliver a shorter chunk",
            span,
            label=label,
            labels=[Label(cons.span, f"always takes `{c}`")],
            notes=[f"short chunk: {w}" for w in why],
            help=f"write `final pad` to pad every short chunk to {c.dims[0]} rows (a valid "
            f"length comes with it), or declare `{cons.name}: {sym}`",
        )
    ]


def _after_done(s: Stream, cons: Port) -> list[Diagnostic]:
    if not s.after_done_continue or s.final is FinalMode.PAD:
        return []
    c = cons.type
    assert c is not None
    span = s.after_done_span or s.span
    sym = TensorType(c.dtype, (Dim.sym("N"), *c.dims[1:]))
    labels = [Label(cons.span, f"always takes `{c}`")]
    if s.final_span is not None:
        labels.append(Label(s.final_span, "does not pad empty chunks"))
    return [
        diag(
            "WG508",
            f"`after_done continue` offers empty chunks, but consumer `{s.consumer}` has a "
            f"static leading dim ({c.dims[0]})",
            span,
            label="empty chunks after the producer is done",
            labels=labels,
            help=f"write `final pad` (empty chunks arrive padded to {c.dims[0]} rows with valid "
            f"length 0), or declare `{cons.name}: {sym}`",
        )
    ]


# ---------------------------------------------------------------------------------- fed twice


def _fed_twice(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    first: dict[tuple[str, str], Stream] = {}
    for s in model.streams:
        key = (s.consumer.node, s.consumer.port)
        port = _endpoint(model, s, producer=False)
        if port is None or port.direction is not PortDir.IN:
            continue
        if key not in first:
            first[key] = s
            continue
        f = first[key]
        out.append(
            diag(
                "WG507",
                f"`{s.consumer}` is fed by two streams, `{f.name}` and `{s.name}`",
                s.consumer.span,
                label=f"fed again by `{s.name}`",
                labels=[Label(f.consumer.span, f"first fed by `{f.name}` here")],
                help="a consumer port takes one stream; give the node another `in` port, or "
                "merge the producers into one port",
            )
        )
    for w in model.walks:
        for call in w.calls:
            for b in call.reads:
                s = first.get((call.node, b.port))
                if s is not None:
                    out.append(_bound_and_streamed(call.node, b.port, b.channel, b.span, s))
    return out


def _bound_and_streamed(node: str, port: str, channel: str, span: Span, s: Stream) -> Diagnostic:
    arg = port if port == channel else f"{port} = {channel}"
    return diag(
        "WG507",
        f"port `{port}` of `{node}` is fed by stream `{s.name}` and also bound from channel "
        f"`{channel}`",
        span,
        label="bound from a channel here",
        labels=[Label(s.consumer.span, f"fed by stream `{s.name}` here")],
        help=f"drop `{arg}` from the call: the stream feeds `{node}.{port}` a chunk per call",
    )
