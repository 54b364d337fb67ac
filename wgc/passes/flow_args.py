"""The `flows` pass's checks of one walk call's arguments (WG703, WG704, WG705), and the span
helpers its messages share. Not a pass of its own: `wgc.passes.flows` calls these."""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir.flow import ArgKind, FArg, Flow, FlowKind, For, WalkCall, iter_fstmts
from wgc.ir.model import Model
from wgc.ir.query import persisted_channels, walk_input_type
from wgc.ir.types import Dim, DType, TensorType
from wgc.ir.walk import EdgeKind, Walk, WalkInput

_OPTION_HELP = (
    "an `int` option fits an `i32`/`i64` scalar (`[]` or `[1]`), a `float` one an "
    "`f16`/`bf16`/`f32` scalar, a `bool` one a `bool` scalar, and a `str` one a 1-D integer "
    "input of any length (`i64[T]`: the runtime hands it over as its UTF-8 bytes)"
)


def channel_type(
    model: Model, flow: Flow, c: WalkCall, a: FArg, walk: Walk, persisters: dict[str, list[Walk]]
) -> Diagnostic | None:
    """WG703 for a persisted channel passed to a walk input it does not fit."""
    want = walk_input_type(model, walk, a.param)
    if want is None:
        return None
    called = {s.walk for s in calls(flow)}
    candidates = [w for w in persisters[a.name] if w.name in called]
    for pw in candidates or persisters[a.name]:
        got = persisted_channels(model, pw).get(a.name)
        if got is None or got.agrees(want):
            continue
        site = next(
            (e.span for e in pw.edges if e.kind is EdgeKind.PERSISTED and e.channel == a.name),
            None,
        )
        return diag(
            "WG703",
            f"`{a.name}` is `{got}` but input `{a.param}` of walk `{walk.name}` is `{want}`",
            value_span(a),
            label=f"`{got}`",
            labels=[Label(site, f"persisted by `{pw.name}` as `{got}`")] if site else [],
            help=f"pass a channel of type `{want}`, or change the type of input `{a.param}`",
        )
    return None


def option_arg(model: Model, a: FArg, walk: Walk, inp: WalkInput) -> Diagnostic | None:
    """WG703 for an option passed to a walk input its kind does not fit."""
    decl = model.option(a.name)
    want = walk_input_type(model, walk, a.param)
    if decl is None or want is None or option_fits(decl.type, want):
        return None  # unknown options are WG108
    return diag(
        "WG703",
        f"option `{a.name}` is a `{decl.type}` but input `{a.param}` of walk `{walk.name}` is "
        f"`{want}`",
        value_span(a),
        label=f"a `{decl.type}` option",
        labels=[Label(decl.span, "declared here")],
        help=_OPTION_HELP,
    )


def option_fits(kind: str, t: TensorType) -> bool:
    if kind == "str":  # its UTF-8 bytes, one element each
        ints = (DType.I32, DType.I64, DType.U8)
        return t.dtype in ints and t.rank == 1 and not t.dims[0].is_static
    dtypes = {
        "int": (DType.I32, DType.I64),
        "float": (DType.F16, DType.BF16, DType.F32),
        "bool": (DType.BOOL,),
    }.get(kind, ())
    scalar = t.rank == 0 or (t.rank == 1 and t.dims[0].agrees(Dim.int_(1)))
    return t.dtype in dtypes and scalar


def unknown_value(
    flow: Flow, c: WalkCall, a: FArg, scope: tuple[str, ...], persisted: list[str]
) -> Diagnostic:
    """WG705: the argument's value is no `for` variable in scope and no persisted channel."""
    assert flow.body is not None  # only a flow with a body is checked
    loop_vars = {s.var for s in iter_fstmts(flow.body) if isinstance(s, For)}
    written = a.name if a.kind is ArgKind.NAME else f"{a.name}.{a.attr}"
    if a.name in loop_vars:
        label = f"`{a.name}` is not bound here"
        hint = (
            f"`{a.name}` is only bound inside its `for {a.name} in request.inputs {{ ... }}`; "
            "move the call into the loop"
        )
    elif a.kind is ArgKind.SEGMENT_FIELD:
        label = f"`{a.name}` is not a `for` variable"
        hint = "`VAR.FIELD` reads a field of the input segment bound by `for VAR in ...`"
    else:
        label = "not a persisted channel or a `for` variable"
        mean = did_you_mean(a.name, [*persisted, *scope], end=" ")
        hint = (
            f"{mean}a walk argument is a `for` variable, `VAR.FIELD`, `option.NAME`, "
            "`request.first(m)`, or a channel some walk persists (`persist NAME`)"
        )
    return diag(
        "WG705",
        f"unknown value `{written}` in argument `{a.param}` of walk `{c.walk}`",
        value_span(a),
        label=label,
        labels=via_labels(c),
        help=hint,
    )


def missing(flow: Flow, c: WalkCall, walk: Walk) -> Diagnostic | None:
    """WG704: a walk input without `?` that the call does not pass."""
    passed = {a.param for a in c.args}
    gaps = [i for i in walk.inputs if not i.optional and i.name not in passed]
    if not gaps:
        return None
    names = join_names([i.name for i in gaps])
    plural = "s" if len(gaps) > 1 else ""
    example = ", ".join(f"{i.name} = ..." for i in gaps)
    notes = []
    if flow.kind is FlowKind.ON_STREAM:
        notes.append(
            f"flow `{flow.name}` runs once per chunk of stream `{flow.on_stream}`; the chunk "
            "feeds the stream's consumer port by itself, not a walk input"
        )
    return diag(
        "WG704",
        f"walk `{walk.name}` is called without its input{plural} {names}",
        call_name_span(c),
        label=f"missing {names}",
        labels=[Label(i.span, f"`{i.name}` declared here") for i in gaps] + via_labels(c),
        notes=notes,
        help=f"pass {'them' if gaps[1:] else 'it'}: `{walk.name}({example})`, or mark the "
        f"input{plural} optional (`{gaps[0].name}?`) if the walk can run without "
        + ("them" if gaps[1:] else "it"),
    )


# ---------------------------------------------------------------- shared helpers
def calls(flow: Flow):
    if flow.body is None:
        return ()
    return (s for s in iter_fstmts(flow.body) if isinstance(s, WalkCall))


def via_labels(c: WalkCall) -> list[Label]:
    """Where a call written in a subflow was expanded from (the outermost call site)."""
    if not c.via:
        return []
    name, span = c.via[-1]
    return [
        Label(
            span,
            f"in subflow `{c.via[0][0]}`, called here"
            if len(c.via) == 1
            else f"in subflow `{c.via[0][0]}`, expanded from `{name}` here",
        )
    ]


def value_span(a: FArg) -> Span:
    """The value of ``param = value`` (its last token(s)); the whole argument if unsure."""
    text = {
        ArgKind.NAME: a.name,
        ArgKind.OPTION: f"option.{a.name}",
        ArgKind.SEGMENT_FIELD: f"{a.name}.{a.attr}",
        ArgKind.FIRST: f"request.first({a.name})",
    }[a.kind]
    sp = a.span
    start = sp.end_col - len(text)
    if sp.end_line != sp.line or start < sp.col:
        return sp
    return Span(sp.file, sp.line, start, sp.line, sp.end_col)


def call_name_span(c: WalkCall) -> Span:
    sp = c.span
    return Span(sp.file, sp.line, sp.col, sp.line, sp.col + len(c.walk))


def join_names(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
