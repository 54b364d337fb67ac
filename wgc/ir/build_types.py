"""Building params, options and tensor types (with their dims, shape buckets included).

Options are built before any type, so a dim that reads `option.NAME` (a shape bucket) can
evaluate itself for every value the option may take (`build_buckets`; `<=K` is `build_bounded`).
Codes reported here: WG009 (an option's kind, values or default), WG105/WG203 (params, values not
evaluating), WG202 (a dim not a non-negative integer), WG206 (a default arm naming a value its
selector cannot take), WG004 (dtypes).
"""

from __future__ import annotations

from collections.abc import Iterable

from lark import Tree

from wgc.diagnostics.diagnostic import Label
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.build_bounded import bounded
from wgc.ir.build_buckets import bucket_dim, is_size
from wgc.ir.build_core import BuilderCore, fits, literal
from wgc.ir.decls import OPTION_TYPES, OptionDecl, Param
from wgc.ir.parse_tree import Branch, ParseTree, branch, kids, opt_sub, sub, subs, text, tok
from wgc.ir.types import DTYPE_NAMES, Dim, DType, TensorType

_EXAMPLE = {"bool": "false", "int": "1", "float": "1.0", "str": '"x"'}


class TypeBuilder(BuilderCore):
    # ------------------------------------------------------------------ params
    def param(self, t: ParseTree) -> Param:
        name = text(t, 0)
        ex = self.expr(branch(t, 1))
        value = self.overrides[name] if name in self.overrides else self.static_value(ex)
        if value is None:
            self.failed_params.add(name)
        elif name not in self.params:
            self.params[name] = value
        return Param(name, ex, value, self.span(t), self.span(tok(t, 0)))

    # ------------------------------------------------------------------ options
    def option(self, t: ParseTree) -> OptionDecl:
        name_t, typ_t, choices_t, default_t = tok(t, 0), tok(t, 1), opt_sub(t, 2), branch(t, 3)
        name, typ = str(name_t), str(typ_t)
        per_mode = isinstance(default_t, Tree) and default_t.data == "default_match"
        ex = None if per_mode else self.expr(default_t)
        default: E.Value = False
        choices: tuple[E.Value, ...] = ()
        if typ not in OPTION_TYPES:
            self.error(
                "WG009",
                f"unknown option type `{typ}`",
                typ_t,
                label="not an option type",
                help=f"{did_you_mean(typ, OPTION_TYPES, end=' ')}option types are "
                + ", ".join(f"`{x}`" for x in OPTION_TYPES),
            )
            return OptionDecl(name, typ, default, self.span(t), self.span(name_t), ex)
        if choices_t is not None:
            choices = self.choices(name, typ, choices_t)
        if ex is not None:
            v = self.option_value(name, typ, choices, ex, default_t, "default")
            if v is not None:
                default = v
        decl = OptionDecl(
            name,
            typ,
            default,
            self.span(t),
            self.span(name_t),
            ex,
            choices=choices,
            choices_span=self.span(choices_t) if choices_t is not None else None,
        )
        self.options.setdefault(name, decl)
        return decl

    def choices(self, name: str, typ: str, t: ParseTree) -> tuple[E.Value, ...]:
        if typ == "bool":
            self.error(
                "WG009",
                f"option `{name}` is a `bool`: it has no list of values",
                t,
                label="a `bool` is `true` or `false`",
                help=f"drop the `in [...]`, or make `{name}` an `int` or `str` option",
            )
            return ()
        out: list[E.Value] = []
        seen: dict[E.Value, Branch] = {}
        for c in t.children:
            v = self.option_value(name, typ, (), self.expr(c), c, "value")
            if v is None:
                continue
            if v in seen:
                self.error(
                    "WG009",
                    f"option `{name}` lists {literal(v)} twice",
                    c,
                    label="listed again",
                    labels=[Label(self.span(seen[v]), "first listed here")],
                    help="list each value once",
                )
                continue
            seen[v] = c
            out.append(v)
        return tuple(out)

    def option_value(
        self, name: str, typ: str, choices: tuple[E.Value, ...], ex: E.Expr, at: Branch, what: str
    ) -> E.Value | None:
        """A default, listed value or per-mode default of option ``name``, checked: of kind
        ``typ`` (an int is a float), and one of ``choices`` when there are any."""
        v = self.static_value(ex)
        if v is None:
            return None
        if not fits(typ, v):
            self.error(
                "WG009",
                f"{what} of option `{name}` is not of type `{typ}`",
                at,
                label=f"expected a `{typ}`",
                help=f"give a `{typ}` {what}, e.g. `option {name}: {typ} = {_EXAMPLE[typ]}`"
                if what == "default"
                else f"give a `{typ}` {what}, e.g. `{_EXAMPLE[typ]}`",
            )
            return None
        v = float(v) if typ == "float" else v
        if choices and v not in choices:
            self.error(
                "WG009",
                f"{what} {literal(v)} of option `{name}` is not one of its values",
                at,
                label="not listed in `in [...]`",
                help=f"{did_you_mean(str(v), [str(c) for c in choices], end=' ')}"
                f"`{name}` takes {_values(choices)}",
            )
            return None
        return v

    def per_mode(self, t: ParseTree, decl: OptionDecl) -> OptionDecl:
        """``decl`` with its per-mode default (`= match option.MODE { ... }`) resolved; run once
        every option is built, so the selector may be declared anywhere."""
        sel_t, arms = tok(sub(t, 3), 0), subs(sub(t, 3), 1)
        sel = self.options.get(str(sel_t))
        if sel is None:
            self.error(
                "WG108",
                f"unknown option `{sel_t}`",
                sel_t,
                label="not a declared option",
                help=did_you_mean(str(sel_t), list(self.options))
                or "a per-mode default is picked by another option's value",
            )
            return decl
        if sel.name == decl.name or sel.name in self.per_mode_names:
            message = (
                f"option `{decl.name}` picks its own default"
                if sel.name == decl.name
                else f"the default of `{decl.name}` is picked by `{sel.name}`, whose own "
                "default is picked by an option"
            )
            self.error(
                "WG009",
                message,
                sel_t,
                label="needs a plain default",
                help="pick a per-mode default by an option with a plain default value",
            )
            return decl
        by: list[tuple[E.Value, E.Value]] = []
        fallback: E.Value | None = None
        exprs: list[E.Expr] = []
        for arm in arms:
            pattern_t, value_t = sub(arm, 0), branch(arm, 1)
            ex = self.expr(value_t)
            exprs.append(ex)
            value = self.option_value(decl.name, decl.type, decl.choices, ex, value_t, "default")
            for p in subs(pattern_t):
                if p.data == "pat_name" and text(p, 0) == "_":
                    fallback = value if value is not None else fallback
                    continue
                key = self.pattern_value(p, sel)
                if key is not None and value is not None and key not in dict(by):
                    by.append((key, value))
        if fallback is None:
            fallback = self.exhaustive_default(decl, sel, dict(by), sub(t, 3))
        return OptionDecl(
            decl.name,
            decl.type,
            fallback,
            decl.span,
            decl.name_span,
            None,
            choices=decl.choices,
            default_by=sel.name,
            by_value=tuple(by),
            arm_exprs=tuple(exprs),
            choices_span=decl.choices_span,
        )

    def exhaustive_default(
        self, decl: OptionDecl, sel: OptionDecl, by: dict[E.Value, E.Value], at: ParseTree
    ) -> E.Value:
        """The default of a per-mode default without a `_` arm: every value of the selector
        must have an arm, and the selector's own default picks it."""
        values = sel.choices or ((True, False) if sel.type == "bool" else ())
        missing = [v for v in values if v not in by]
        if values and not missing:
            return by[sel.default]
        shown = (
            f": {_values(missing)} {'has' if len(missing) == 1 else 'have'} none" if missing else ""
        )
        self.error(
            "WG009",
            f"the per-mode default of `{decl.name}` has no arm for every value of "
            f"`{sel.name}`{shown}",
            at,
            label="no `_ => ...` arm",
            help="add `_ => DEFAULT` for every other value",
        )
        return decl.default

    # ------------------------------------------------------------------ types
    def alias_type(self, name: str, seen: frozenset[str] = frozenset()) -> TensorType | None:
        if name in self.resolved_aliases:
            return self.resolved_aliases[name]
        te = self.aliases.get(name)
        if te is None or name in seen:
            return None
        if te.data == "type_ref":
            result = self.alias_type(text(te, 0), seen | {name})
        else:
            result = self.tensor_type(te)
        self.resolved_aliases[name] = result
        return result

    def type_expr(self, te: ParseTree) -> tuple[TensorType | None, str | None]:
        if te.data == "type_ref":
            ref = text(te, 0)
            if ref in DTYPE_NAMES:
                self.error(
                    "WG202",
                    f"`{ref}` needs dims: write `{ref}[]` for a scalar",
                    te,
                    label="missing `[...]`",
                    help=f"a scalar is `{ref}[]`; a vector `{ref}[N]`",
                )
                return None, None
            return self.alias_type(ref), ref
        return self.tensor_type(te), None

    def tensor_type(self, te: ParseTree) -> TensorType | None:
        dtype_tok = tok(te, 0)
        dname = str(dtype_tok)
        dims_t = [c for c in kids(te, 1) if c is not None]
        dtype = None
        if dname not in DTYPE_NAMES:
            self.error(
                "WG004",
                f"unknown dtype `{dname}`",
                dtype_tok,
                label="not a dtype",
                help=f"{did_you_mean(dname, DTYPE_NAMES, end=' ')}dtypes are "
                + " ".join(f"`{d}`" for d in DTYPE_NAMES),
            )
        else:
            dtype = DType(dname)
        dims = [self.dim(dt) for dt in dims_t]
        if dtype is None or None in dims:
            return None
        return TensorType(dtype, tuple(d for d in dims if d is not None))

    def dim(self, t: Branch) -> Dim | None:
        if isinstance(t, Tree) and t.data in ("any_dim", "bounded_dim"):
            return Dim.any_() if t.data == "any_dim" else bounded(self, self.expr(branch(t, 0)))
        ex = self.expr(t)
        if isinstance(ex, E.Ref) and ex.name not in self.params:
            return Dim.sym(ex.name)
        if self.uses_failed_param(ex):
            return None
        if E.option_refs(ex):
            return bucket_dim(self, ex)
        if not E.is_static(ex, self.params):
            bad = next((r for r in E.refs(ex) if r.name not in self.params), None)
            self.error(
                "WG202",
                "a dim expression may only use integers, `param`s and shape-bucket options",
                ex.span,
                label=f"`{bad.name}` is not a param" if bad else "not static",
                help="write a symbolic dim on its own (`T`), or declare the names as params",
            )
            return None
        v = self.static_value(ex)
        if v is None:
            return None
        if not is_size(v):
            self.error(
                "WG202",
                f"a dim must be a non-negative integer, found `{v!r}`",
                ex.span,
                label="invalid dim",
            )
            return None
        if isinstance(ex, E.Ref):
            return Dim.param(ex.name, int(v))
        if isinstance(ex, E.Lit):
            return Dim.int_(int(v))
        return Dim.param(E.render(ex), int(v))


def _values(choices: Iterable[E.Value]) -> str:
    return ", ".join(literal(c) for c in choices)
