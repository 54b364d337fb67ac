"""Pass `types`: values agree with the ports that consume them; option uses are well typed.

Invariants proved (and the code reported when one fails):

* WG201: every channel edge into a call's input port carries a value whose type agrees with the
  port's (same dtype and rank; static dims equal — symbolic and `?` dims are checked at run
  time). A walk input without a declared type takes the type of the first port it feeds, so
  every other port it feeds must agree with that one. Streamed edges are `chunk_policy`'s
  (WG503/WG504); `emit` and `persist` accept any type.
* WG202: `type A = f32` (a bare dtype) is rejected like a bare dtype on a port, which the
  builder reports; other dims are the builder's.
* WG203: a `repeat` count is an integer expression (literals, `param`s, int options) whose
  literals are in the 64-bit range, even when an option keeps it from being evaluated here.
* WG204: an `option` used as a condition is a `bool`; one used in a `repeat` count is an `int`;
  a `param` used bare as a condition is a `bool`, and one compared is compared with a value of
  its kind (a number with a number, a string with a string, a bool with a bool).

Unknown names (nodes, ports, options, params) are the `names` pass's; this pass skips them.
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Diagnostic, Label, diag
from wgc.ir import expr as E
from wgc.ir.decls import OPTION_TYPES
from wgc.ir.flow import Flow, If, OptionCond, ParamCmp, Repeat, cond_atoms, iter_fstmts
from wgc.ir.model import Model
from wgc.ir.query import consumer_port_type, walk_input_type
from wgc.ir.types import DTYPE_NAMES, Dim, DimKind, TensorType
from wgc.ir.walk import Call, Edge, EdgeKind, EndKind, Walk

NAME = "types"
CODES = ("WG201", "WG202", "WG203", "WG204")


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for w in model.walks:
        out += _walk(model, w)
    out += _bare_dtype_aliases(model)
    for f in model.flows:
        out += _flow(model, f)
    return out


# ---------------------------------------------------------------- WG201 channel types
def _walk(model: Model, w: Walk) -> list[Diagnostic]:
    out = []
    first_use: dict[str, Edge] = {}  # untyped walk input -> the edge that fixed its type
    seen: set = set()  # a loop-carried read has two edges (init and carried) of one type
    for e in w.edges:
        if e.kind is EdgeKind.STREAMED or e.dst.kind is not EndKind.CALL:
            continue
        assert e.dst.call is not None and e.dst.port is not None
        want = consumer_port_type(model, w, e.dst.call, e.dst.port)
        if want is None:
            continue
        if e.src.kind is EndKind.INPUT and e.src.name is not None:
            inp = w.input(e.src.name)
            if inp is not None and inp.type is None:
                first = first_use.setdefault(e.src.name, e)
                if first is not e:
                    out += _untyped_input(model, w, e, first, want)
                continue
            got = walk_input_type(model, w, e.src.name)
        else:
            got = e.type
        if got is not None and not got.agrees(want) and (e.span, got) not in seen:
            seen.add((e.span, got))
            out.append(_mismatch(model, w, e, got, want))
    return out


def _consumer(w: Walk, e: Edge) -> tuple[Call, str]:
    """The call and port that ``e`` delivers to (`_walk` only looks at edges into a call)."""
    assert e.dst.call is not None and e.dst.port is not None
    return w.calls[e.dst.call], e.dst.port


def _mismatch(model: Model, w: Walk, e: Edge, got: TensorType, want: TensorType) -> Diagnostic:
    call, _ = _consumer(w, e)
    labels = []
    src = _source_label(model, w, e, got)
    if src is not None:
        labels.append(src)
    return diag(
        "WG201",
        f"port `{e.dst.port}` of `{call.node}` expects `{want}`, "
        f"but channel `{e.channel}` is `{got}`",
        e.span,
        label=f"`{e.channel}: {got}` read here",
        labels=labels,
        help="make the producer's and the consumer's port types agree, or convert the value "
        "with a node in between",
        notes=[_difference(got, want)],
    )


def _source_label(model: Model, w: Walk, e: Edge, got: TensorType) -> Label | None:
    if e.src.kind is EndKind.INPUT:
        inp = w.input(e.src.name or "")
        return Label(inp.span, f"declared `{got}` here") if inp else None
    if e.src.kind is EndKind.CALL and e.src.call is not None:
        call = w.calls[e.src.call]
        bind = next(
            (b for b in call.writes if b.port == e.src.port and b.channel == e.channel),
            next((b for b in call.writes if b.port == e.src.port), None),
        )
        what = f"`{call.node}.{e.src.port}`"
        if e.kind is EdgeKind.ACCUMULATED:
            return Label(bind.span if bind else call.span, f"{what} stacked by `yield all`")
        return Label(bind.span if bind else call.span, f"bound from {what}: `{got}`")
    return None


def _untyped_input(model: Model, w: Walk, e: Edge, first: Edge, want: TensorType) -> list:
    fcall, fport = _consumer(w, first)
    ftype = consumer_port_type(model, w, fcall.id, fport)
    if ftype is None or ftype.agrees(want):
        return []
    call, port = _consumer(w, e)
    inp = w.input(e.src.name or "")
    labels = [Label(first.span, f"`{fcall.node}.{fport}` expects `{ftype}`")]
    if inp is not None:
        labels.append(Label(inp.span, "declared without a type"))
    return [
        diag(
            "WG201",
            f"walk input `{e.src.name}` feeds ports of different types",
            e.span,
            label=f"`{call.node}.{port}` expects `{want}`",
            labels=labels,
            help=f"declare the input's type, e.g. `{e.src.name}: {ftype}`, and make the ports "
            "agree",
            notes=[_difference(ftype, want)],
        )
    ]


def _difference(got: TensorType, want: TensorType) -> str:
    if got.dtype is not want.dtype:
        return f"dtypes differ: `{got.dtype.value}` vs `{want.dtype.value}`"
    if got.rank != want.rank:
        return f"ranks differ: {got.rank} vs {want.rank}"
    for i, (a, b) in enumerate(zip(got.dims, want.dims, strict=True)):
        if not a.agrees(b):
            return f"dim {i} differs: {_dim(a)} vs {_dim(b)}"
    return "the types differ"  # pragma: no cover - only called on disagreeing types


# ---------------------------------------------------------------- WG202 aliases of a bare dtype
def _bare_dtype_aliases(model: Model) -> list[Diagnostic]:
    return [
        diag(
            "WG202",
            f"`{t.ref}` needs dims: write `{t.ref}[]` for a scalar",
            t.span,
            label="missing `[...]`",
            help=f"a scalar is `type {t.name} = {t.ref}[]`; a vector `type {t.name} = {t.ref}[N]`",
        )
        for t in model.types
        if t.ref in DTYPE_NAMES and model.type(t.ref) is None
    ]


# ---------------------------------------------------------------- WG203 / WG204 flows
def _flow(model: Model, f: Flow) -> list[Diagnostic]:
    out = []
    if f.when is not None:
        out += _cond(model, f.when)
    if f.body is None:
        return out
    for s in iter_fstmts(f.body):
        if isinstance(s, If):
            out += _cond(model, s.cond)
        elif isinstance(s, Repeat):
            out += _repeat(model, s)
    return out


def _param_kind(v: object) -> str:
    if isinstance(v, bool):
        return "bool"
    return "str" if isinstance(v, str) else "number"


def _param_cond(model: Model, atom: ParamCmp) -> list[Diagnostic]:
    p = model.param(atom.name)
    if p is None or p.value is None:
        return []  # unknown (the names pass) or broken where declared
    kind = _param_kind(p.value)
    if atom.op is None and kind != "bool":
        return [
            diag(
                "WG204",
                f"param `{atom.name}` is {kind_article(kind)}, not a `bool`, so it cannot be a "
                "condition",
                atom.span,
                label=f"{kind_article(kind)} param",
                labels=[Label(p.span, "declared here")],
                help=f"compare it: `{atom.name} > 1`, `{atom.name} == ...`",
            )
        ]
    if atom.op is None or atom.value is None or _param_kind(atom.value) == kind:
        if atom.op in ("<", "<=", ">", ">=") and kind != "number":
            return [
                diag(
                    "WG204",
                    f"param `{atom.name}` is {kind_article(kind)}: it has no order",
                    atom.span,
                    label=f"`{atom.op}` on {kind_article(kind)}",
                    help="compare it with `==` or `!=`",
                )
            ]
        return []
    return [
        diag(
            "WG204",
            f"param `{atom.name}` is {kind_article(kind)}, but it is compared with "
            f"{kind_article(_param_kind(atom.value))}",
            atom.value_span or atom.span,
            label=f"expected {kind_article(kind)}",
            labels=[Label(p.span, "declared here")],
            help="compare a param with a value of its own kind",
        )
    ]


def kind_article(kind: str) -> str:
    return "a number" if kind == "number" else _a(kind)


def _cond(model: Model, cond) -> list[Diagnostic]:
    out = []
    for atom in cond_atoms(cond):
        if isinstance(atom, ParamCmp):
            out += _param_cond(model, atom)
            continue
        if not isinstance(atom, OptionCond):
            continue
        opt = model.option(atom.name)
        if opt is None or opt.type == "bool" or opt.type not in OPTION_TYPES:
            continue  # unknown: the names pass; a bad option type: the builder's WG009
        out.append(
            diag(
                "WG204",
                f"option `{atom.name}` is {_a(opt.type)}, not a `bool`, so it cannot be a "
                "condition",
                atom.span,
                label=f"{_a(opt.type)} option",
                labels=[Label(opt.span, "declared here")],
                help=f"declare it `option {atom.name}: bool = ...`, or use a `bool` option",
            )
        )
    return out


def _repeat(model: Model, r: Repeat) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    kind = _int_expr(model, r.count, out)
    if kind is None or out:
        return out
    if kind != "int":
        return [
            diag(
                "WG203",
                f"a `repeat` count must be an integer, found `{E.render(r.count)}`",
                r.count.span,
                label=f"{_a(kind)}",
                help="write an integer, a `param` or an `int` option",
            )
        ]
    if E.is_static(r.count, model.param_values()):
        try:
            v = E.evaluate(r.count, model.param_values())
        except E.EvalError as err:
            return [diag(err.code, err.message, err.span, help=err.help)]
        if isinstance(v, int) and v < 0:
            return [
                diag(
                    "WG203",
                    f"a `repeat` count must not be negative, found `{v}`",
                    r.count.span,
                    label="negative count",
                    help="write a count of zero or more",
                )
            ]
    return out


def _int_expr(model: Model, ex: E.Expr, out: list[Diagnostic]) -> str | None:
    """The type name of ``ex`` (`int`, `float`, `bool`, `str`), reporting options of the wrong
    type into ``out``; None when a name is unknown (the `names` pass reports it)."""
    if isinstance(ex, E.Lit):
        if not E.in_range(ex.value):  # a count with an option is never evaluated here
            err = E.range_error(ex, ex.value)
            out.append(diag(err.code, err.message, err.span, help=err.help))
            return None
        return _value_type(ex.value)
    if isinstance(ex, E.Ref):
        p = model.param(ex.name)
        return None if p is None or p.value is None else _value_type(p.value)
    if isinstance(ex, E.OptionRef):
        opt = model.option(ex.name)
        if opt is None or opt.type not in OPTION_TYPES:
            return None
        if opt.type != "int":
            out.append(
                diag(
                    "WG204",
                    f"option `{ex.name}` is {_a(opt.type)}, but a `repeat` count needs an `int`",
                    ex.span,
                    label=f"{_a(opt.type)} option",
                    labels=[Label(opt.span, "declared here")],
                    help=f"declare it `option {ex.name}: int = ...`",
                )
            )
        return "int"
    if isinstance(ex, E.Neg):
        return _int_expr(model, ex.operand, out)
    left = _int_expr(model, ex.left, out)
    right = _int_expr(model, ex.right, out)
    if left is None or right is None:
        return None
    if left == right == "int":
        return "int"
    return "float" if {left, right} <= {"int", "float"} else (left if left != "int" else right)


def _value_type(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str"


def _dim(d: Dim) -> str:
    """`4`, or `n` (= 4) for a param dim, so the user sees why two spellings differ."""
    return f"`{d}` (= {d.value})" if d.kind is DimKind.PARAM else f"`{d}`"


def _a(type_name: str) -> str:
    """`a `bool``, `an `int``: the type name with its article, for messages."""
    return f"{'an' if type_name[0] in 'aeiou' else 'a'} `{type_name}`"
