"""Building a shape-bucket dim: a dim over `option.NAME`s, one size per combination of the
options' values (each bucket is captured separately). Owns WG205 (an option that is not a shape
bucket, or too many buckets), and for a bucket dim WG108 (an unknown option), WG202 (a name that
is not a param, a size that is not a non-negative integer) and WG203 (a size that does not
evaluate)."""

from __future__ import annotations

import itertools

from wgc.diagnostics.diagnostic import Label
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.build_core import BuilderCore, a_type, literal
from wgc.ir.decls import OptionDecl
from wgc.ir.types import Case, Dim

# option-value combinations one bucket dim may have (3 options of 10 values: 1,000 graphs)
MAX_CASES = 64


def bucket_dim(b: BuilderCore, ex: E.Expr) -> Dim | None:
    """A dim over `option.NAME`s: one size per combination of the options' values."""
    names = sorted({o.name for o in E.option_refs(ex)})
    b.dim_options.update(names)
    decls: list[OptionDecl] = []
    for o in E.option_refs(ex):
        decl = b.options.get(o.name)
        if decl is None:
            b.error(
                "WG108",
                f"unknown option `{o.name}`",
                o.span,
                label="not a declared option",
                help=did_you_mean(o.name, list(b.options))
                or f"declare it with `option {o.name}: int in [...] = ...`",
            )
            return None
        if decl.type != "int" or not decl.choices:
            _not_a_bucket(b, o, decl)
            return None
        if decl not in decls:
            decls.append(decl)
    bad = next((r for r in E.refs(ex) if r.name not in b.params), None)
    if bad is not None:
        b.error(
            "WG202",
            "a dim expression may only use integers, `param`s and shape-bucket options",
            bad.span,
            label=f"`{bad.name}` is not a param",
            help="declare it as a `param`, or write a symbolic dim on its own",
        )
        return None
    decls.sort(key=lambda d: d.name)
    combos = list(itertools.product(*(d.choices for d in decls)))
    if len(combos) > MAX_CASES:
        b.error(
            "WG205",
            f"`{E.render(ex)}` has {len(combos)} shape buckets, more than {MAX_CASES}",
            ex.span,
            label="too many buckets",
            help="list fewer values for its options: each bucket is captured separately",
        )
        return None
    cases: list[Case] = []
    for combo in combos:
        values = dict(zip(names, combo, strict=True))
        size = _bucket_size(b, ex, values)
        if size is None:
            return None
        cases.append((tuple(sorted(values.items())), size))
    return Dim.bucket(E.render(ex), tuple(cases))


def _bucket_size(b: BuilderCore, ex: E.Expr, values: dict[str, E.Value]) -> int | None:
    bound = _bind_options(ex, values)
    try:
        v = E.evaluate(bound, b.params)
    except E.EvalError as err:
        where = ", ".join(f"`{k}` = {literal(v)}" for k, v in values.items())
        b.error(err.code, f"{err.message} (for {where})", ex.span, help=err.help)
        return None
    if not is_size(v):
        where = ", ".join(f"`{k}` = {literal(x)}" for k, x in values.items())
        b.error(
            "WG202",
            f"a dim must be a non-negative integer, but `{E.render(ex)}` is `{v!r}` for {where}",
            ex.span,
            label="invalid dim for this bucket",
            help="choose option values for which every dim is a whole size",
        )
        return None
    return int(v)


def _not_a_bucket(b: BuilderCore, o: E.OptionRef, decl: OptionDecl) -> None:
    why = (
        f"`{o.name}` is {a_type(decl.type)} option"
        if decl.type != "int"
        else f"`{o.name}` may take any integer"
    )
    b.error(
        "WG205",
        f"option `{o.name}` in a dim is not a shape bucket: {why}",
        o.span,
        label="not a shape bucket",
        labels=[Label(decl.span, "declared here")],
        help=f"declare it with its sizes, e.g. `option {o.name}: int in [16, 32] = 16`, "
        "so every request falls into one of a few captured shapes",
    )


def _bind_options(ex: E.Expr, values: dict[str, E.Value]) -> E.Expr:
    """``ex`` with every `option.NAME` replaced by its value in ``values``."""
    if isinstance(ex, E.OptionRef):
        return E.Lit(values[ex.name], ex.span)
    if isinstance(ex, E.BinOp):
        return E.BinOp(
            ex.op, _bind_options(ex.left, values), _bind_options(ex.right, values), ex.span
        )
    if isinstance(ex, E.Neg):
        return E.Neg(_bind_options(ex.operand, values), ex.span)
    return ex


def is_size(v: E.Value) -> bool:
    """Whether ``v`` is a dim size: a non-negative integer."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
