"""Building flows and subflows: statements, walk arguments and conditions.

Subflow calls are expanded afterwards (`wgc.ir.subflows`). Codes reported here: WG007 (a `for`
not over `request.inputs`, a `match` on something else than `VAR.modality` or `option.NAME`, an
unknown `request.X(...)`, an escape hatch without `module:function`), WG008 (modalities), WG203
(a comparison value that does not evaluate, a segment count that is not a non-negative integer),
WG206 (a `match option.NAME` pattern or comparison value the option cannot take).
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Label, Span
from wgc.ir import expr as E
from wgc.ir.build_core import BuilderCore, fits, join, kind_of, literal, unquote
from wgc.ir.decls import OptionDecl
from wgc.ir.flow import (
    ArgKind,
    Arm,
    BoolOp,
    Cond,
    Const,
    CountCmp,
    Fail,
    FArg,
    FBlock,
    Flow,
    FlowKind,
    For,
    FStmt,
    If,
    Match,
    Not,
    OptionArm,
    OptionCmp,
    OptionCond,
    OptionMatch,
    ParamCmp,
    Placed,
    Repeat,
    RequestPred,
    Subflow,
    WalkCall,
)
from wgc.ir.parse_tree import ParseTree, branch, kids, opt_sub, sub, subs, text, tok

_CONDITIONS = (
    "conditions are `request.wants(m)`, `request.has(m)`, `request.count(m) == N`, a bool "
    "`option.NAME`, `option.NAME == VALUE`, `placed(NODE)`, a bool `param` or `PARAM == VALUE`, "
    "combined with `not`, `and`, `or`"
)


class FlowBuilder(BuilderCore):
    def flow(self, t: ParseTree) -> Flow:
        name = text(t, 0)
        trig, body_t = opt_sub(t, 1), sub(t, 2)
        kind = FlowKind.ALWAYS
        when = None
        on = None
        trig_span = None
        if trig is not None:
            trig_span = self.span(trig)
            if trig.data == "when":
                kind, when = FlowKind.WHEN, self.cond(sub(trig, 0))
            else:
                kind, on = FlowKind.ON_STREAM, text(trig, 0)
        if body_t.data == "flow_extern":
            target = unquote(text(body_t, 0))
            if ":" not in target:
                self.error(
                    "WG007",
                    f"flow target `{target}` is not a `module:function` path",
                    body_t,
                    label="expected `module:function`",
                    help='write `flow main = "bagel.flows:main"`',
                )
            return Flow(
                name,
                FlowKind.EXTERN,
                None,
                on,
                target,
                None,
                self.span(t),
                trig_span,
                self.span(tok(t, 0)),
            )
        return Flow(
            name,
            kind,
            when,
            on,
            None,
            self.fblock(body_t),
            self.span(t),
            trig_span,
            self.span(tok(t, 0)),
        )

    def subflow(self, t: ParseTree) -> Subflow:
        name, body = tok(t, 0), sub(t, -1)
        names = tuple(str(p) for p in kids(t, 1)[:-1] if p is not None)
        return Subflow(str(name), names, self.fblock(body), self.span(t), self.span(name))

    def fblock(self, t: ParseTree) -> FBlock:
        return FBlock(tuple(self.fstmt(s) for s in subs(t)), self.span(t))

    def body(self, t: ParseTree) -> FBlock:
        """An arm's or `else`'s body: a block, or one statement."""
        return self.fblock(t) if t.data == "fblock" else FBlock((self.fstmt(t),), self.span(t))

    def fstmt(self, t: ParseTree) -> FStmt:
        """One statement of a flow body (braced arm and `else` bodies are `fblock`s, built by
        their callers)."""
        d = t.data
        sp = self.span(t)
        if d == "walk_call":
            args = [self.farg(a) for a in subs(t, 1)]
            return WalkCall(text(t, 0), tuple(args), sp)
        if d == "for_stmt":
            var, obj, attr, body = tok(t, 0), tok(t, 1), tok(t, 2), sub(t, 3)
            if (str(obj), str(attr)) != ("request", "inputs"):
                self.error(
                    "WG007",
                    f"`for` iterates over `request.inputs`, not `{obj}.{attr}`",
                    join(self.span(obj), self.span(attr)),
                    label="expected `request.inputs`",
                    help=f"write `for {var} in request.inputs {{ ... }}`",
                )
            return For(str(var), self.fblock(body), sp)
        if d == "match_stmt":
            subject, arms = sub(t, 0), subs(t, 1)
            if subject.data == "match_option":
                return self.option_match(text(subject, 0), arms, sp)
            return self.modality_match(subject, arms, sp)
        if d == "if_stmt":
            cond_t, then_t = sub(t, 0), sub(t, 1)
            else_t = opt_sub(t, 2) if len(t.children) > 2 else None
            else_block = self.body(else_t) if else_t is not None else None
            return If(self.cond(cond_t), self.fblock(then_t), else_block, sp)
        if d == "repeat_stmt":
            return Repeat(self.expr(branch(t, 0)), self.fblock(sub(t, 1)), sp)
        if d == "fail_stmt":
            return Fail(unquote(text(t, 0)), sp)
        raise AssertionError(f"unexpected flow statement {d}")

    def farg(self, a: ParseTree) -> FArg:
        pname = text(a, 0)
        v = opt_sub(a, 1)
        sp = self.span(a)
        if v is None:
            return FArg(pname, ArgKind.NAME, pname, None, sp)
        if v.data == "fvalue_name":
            return FArg(pname, ArgKind.NAME, text(v, 0), None, sp)
        if v.data == "fvalue_option":
            return FArg(pname, ArgKind.OPTION, text(v, 0), None, sp)
        if v.data == "fvalue_select":
            obj, fn, arg = (str(c) for c in v.children)
            if (obj, fn) != ("request", "first"):
                self.error(
                    "WG007",
                    f"unknown walk argument `{obj}.{fn}(...)`",
                    v,
                    label="not a value",
                    help="`request.first(m)` is the request's first input segment of modality "
                    "`m`; other values are a `for` variable, `VAR.FIELD`, `option.NAME` or a "
                    "persisted channel",
                )
            self.check_modality(tok(v, 2))
            return FArg(pname, ArgKind.FIRST, arg, None, sp)
        return FArg(pname, ArgKind.SEGMENT_FIELD, text(v, 0), text(v, 1), sp)

    def modality_match(self, subject: ParseTree, arms_t: list[ParseTree], sp: Span) -> Match:
        var, attr = tok(subject, 0), tok(subject, 1)
        if str(attr) != "modality":
            self.error(
                "WG007",
                f"`match` inspects `{var}.modality` or `option.NAME`, not `{var}.{attr}`",
                attr,
                label="expected `modality`",
                help=f"write `match {var}.modality {{ text => ..., _ => ... }}`",
            )
        arms: list[Arm] = []
        for arm in arms_t:
            pats: list[str] = []
            for p in subs(sub(arm, 0)):
                if p.data != "pat_name":
                    self.error(
                        "WG007",
                        f"`match {var}.modality` arms name modalities, not values",
                        p,
                        label="not a modality",
                        help="write a modality (`text`, `image | video`) or `_`; values are "
                        "matched with `match option.NAME`",
                    )
                    continue
                pat = branch(p, 0)
                if str(pat) == "_" or self.check_modality(pat):
                    pats.append(str(pat))
            arms.append(Arm(tuple(pats), self.body(sub(arm, 1)), self.span(arm)))
        return Match(str(var), tuple(arms), sp)

    def option_match(self, name: str, arms_t: list[ParseTree], sp: Span) -> OptionMatch:
        decl = self.options.get(name)
        arms: list[OptionArm] = []
        for arm in arms_t:
            values: list[E.Value] = []
            default = False
            for p in subs(sub(arm, 0)):
                if p.data == "pat_name" and text(p, 0) == "_":
                    default = True
                elif decl is not None:
                    v = self.pattern_value(p, decl)
                    if v is not None:
                        values.append(v)
            arms.append(OptionArm(tuple(values), default, self.body(sub(arm, 1)), self.span(arm)))
        return OptionMatch(name, tuple(arms), sp)

    # ------------------------------------------------------------------ conditions
    def cond(self, t: ParseTree) -> Cond:
        d = t.data
        sp = self.span(t)
        if d == "or_":
            return BoolOp("or", self.cond(sub(t, 0)), self.cond(sub(t, 1)), sp)
        if d == "and_":
            return BoolOp("and", self.cond(sub(t, 0)), self.cond(sub(t, 1)), sp)
        if d == "not_":
            return Not(self.cond(sub(t, 0)), sp)
        if d == "true":
            return Const(True, sp)
        if d == "false":
            return Const(False, sp)
        if d == "placed":
            return Placed(text(t, 0), sp)
        if d == "option_cond":
            return OptionCond(text(t, 0), sp)
        if d == "param_cond":
            return ParamCmp(text(t, 0), None, None, sp)
        if d == "param_cmp":
            name_t, op_t, value_t = tok(t, 0), tok(t, 1), branch(t, 2)
            value = self.static_value(self.expr(value_t))
            return ParamCmp(str(name_t), str(op_t), value, sp, self.span(value_t))
        if d == "option_cmp":
            return self.option_cmp(t, sp)
        if d == "request_cmp":
            return self.count_cmp(t, sp)
        obj, pred, arg = (str(c) for c in t.children)
        if obj != "request" or pred not in ("wants", "has"):
            self.error(
                "WG007",
                f"unknown condition `{obj}.{pred}(...)`",
                t,
                label="not a condition" if pred != "count" else "a number, not a condition",
                help="compare the count: `request.count(m) == 1`"
                if (obj, pred) == ("request", "count")
                else _CONDITIONS,
            )
            return Const(False, sp)
        self.check_modality(tok(t, 2))
        return RequestPred(pred, arg, sp)

    def option_cmp(self, t: ParseTree, sp: Span) -> OptionCmp:
        name_t, op_t, value_t = tok(t, 0), tok(t, 1), branch(t, 2)
        name, op = str(name_t), str(op_t)
        value = self.static_value(self.expr(value_t))
        vspan = self.span(value_t)
        decl = self.options.get(name)
        if value is not None and decl is not None:
            value = self.compared(decl, op, value, vspan)
        return OptionCmp(name, op, value, sp, vspan)

    def compared(self, decl: OptionDecl, op: str, value: E.Value, at: Span) -> E.Value | None:
        """``value`` as compared with option ``decl`` by ``op``: WG204 for an ordering of a
        `bool` or `str` option, WG206 for a value the option cannot take."""
        if op not in ("==", "!=") and decl.type in ("bool", "str"):
            self.error(
                "WG204",
                f"`{op}` orders numbers, but option `{decl.name}` is a `{decl.type}`",
                at,
                label="not a number",
                labels=[Label(decl.span, "declared here")],
                help=f"compare a `{decl.type}` option with `==` or `!=`, or `match` it",
            )
            return None
        if not fits(decl.type, value):
            article = "an" if kind_of(value)[0] in "aeiou" else "a"
            self.error(
                "WG206",
                f"option `{decl.name}` is a `{decl.type}`, but it is compared with "
                f"{article} `{kind_of(value)}`",
                at,
                label=f"{literal(value)} is never equal to a `{decl.type}`",
                labels=[Label(decl.span, "declared here")],
                help=f"compare it with a `{decl.type}` value",
            )
            return None
        if decl.type == "float":
            value = float(value)
        if op in ("==", "!=") and decl.choices and value not in decl.choices:
            self.error(
                "WG206",
                f"{literal(value)} is not one of the values of option `{decl.name}`",
                at,
                label="the option never has this value",
                labels=[Label(decl.choices_span or decl.span, "its values")],
                help=f"`{decl.name}` takes " + ", ".join(literal(c) for c in decl.choices),
            )
            return None
        return value

    def count_cmp(self, t: ParseTree, sp: Span) -> CountCmp:
        obj, pred, arg, op_t = tok(t, 0), tok(t, 1), tok(t, 2), tok(t, 3)
        value_t = branch(t, 4)
        if (str(obj), str(pred)) != ("request", "count"):
            self.error(
                "WG007",
                f"unknown comparison `{obj}.{pred}(...)`",
                t,
                label="not a count",
                help="`request.count(m)` counts the input segments of modality `m`; " + _CONDITIONS,
            )
        self.check_modality(arg)
        vspan = self.span(value_t)
        v = self.static_value(self.expr(value_t))
        count: int | None = None
        if v is not None:
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                count = v
            else:
                self.error(
                    "WG203",
                    f"a segment count is compared with a non-negative integer, found {literal(v)}",
                    vspan,
                    label="not a count",
                    help="write `request.count(m) == 1`, `>= 2`, ...",
                )
        return CountCmp(str(arg), str(op_t), count, sp, vspan)
