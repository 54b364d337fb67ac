"""Expanding subflow calls: every call of a `subflow` is replaced by its body, in place.

A subflow is a named flow fragment with parameters (`subflow generate(token) { ... }`), called
from a flow (or another subflow) like a walk (`generate(token = new_token)`). Expansion
substitutes each parameter by the call's argument, as the caller sees it: a segment
(`seg`, `request.first(m)`), `seg.FIELD`, `option.NAME` or a persisted channel. In the body a
parameter is used wherever its value could be: as a walk argument (`w(x = token)`), and, when it
is a segment, as `p.FIELD` and in `match p.modality`. After expansion a subflow is exactly the
flow one would have written out by hand, so every pass checks each expansion in its own context
(what is persisted there, which `request.has` guards hold), lowering and the interpreter see
plain flows, and the walk calls it brings in remember the calls they came through (`via`).

Hygiene: the body sees its parameters and its own `for` variables, never the caller's; a `for`
variable of the body that the caller's scope also binds is renamed (`seg_2`), so a parameter's
value always means what it meant at the call.

Bounds (WG708, checked while expanding, so that no later stage meets more): once expanded, a
flow nests at most `MAX_BLOCKS` statements (as the source may, WG012), at most `MAX_LOOPS`
`for`/`repeat` loops (the generated conductor is Python, whose compiler refuses more than 20
nested loop blocks in a function), subflow calls at most `MAX_BLOCKS` deep, and holds at most
`MAX_STATEMENTS` statements (subflows that each call the next twice double per level). Where a
bound is passed the statement is dropped, once reported per flow.

Codes reported here: WG116 (an argument the subflow has no parameter for, or a parameter not
passed), WG117 (a subflow that calls itself, directly or through others), WG112 (an argument
passed twice), WG705 (a parameter the body uses as a segment, `p.FIELD` or `match
p.modality`, passed something else), WG708 (the bounds above).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.ir.flow import (
    ArgKind,
    Arm,
    FArg,
    FBlock,
    Flow,
    For,
    FStmt,
    If,
    Match,
    OptionArm,
    OptionMatch,
    Repeat,
    Subflow,
    WalkCall,
)
from wgc.parse.depth import MAX_BLOCKS

MAX_LOOPS = 20
MAX_STATEMENTS = 100_000


@dataclass(frozen=True)
class _Env:
    # parameter -> the caller's value; a body `for` variable -> its name
    subst: dict[str, FArg] = field(default_factory=dict[str, FArg])
    renames: dict[str, str] = field(default_factory=dict[str, str])
    segvars: frozenset[str] = frozenset()  # `for` variables in scope, as finally named
    stack: tuple[tuple[str, Span], ...] = ()  # subflow calls being expanded, innermost first
    blocks: int = 0  # statements the expansion is nested in (`for`, `if`, `match`, `repeat`)
    loops: int = 0  # of which `for` and `repeat`: loops of the generated Python


def expand(
    flows: list[Flow], subflows: list[Subflow], walks: set[str]
) -> tuple[list[Flow], list[Subflow], list[Diagnostic]]:
    """The flows with every subflow call expanded, the subflows marked `called`, and what went
    wrong. A name that is a walk is a walk call (a walk and a subflow of one name: WG101)."""
    ex = _Expander({s.name: s for s in reversed(subflows) if s.name not in walks})
    out: list[Flow] = []
    for f in flows:
        if f.body is None:
            out.append(f)
        else:
            ex.start(f)
            body = ex.block(f.body, _Env())
            out.append(dataclasses.replace(f, body=body, written=f.body))
    marked = [dataclasses.replace(s, called=s.name in ex.called) for s in subflows]
    return out, marked, ex.diags


class _Expander:
    def __init__(self, subflows: dict[str, Subflow]) -> None:
        self.subflows = subflows
        self.called: set[str] = set()
        self.diags: list[Diagnostic] = []
        self.counter = 1
        self.size = 0  # statements the current flow's expansion holds
        self.reported = False  # WG708 for the current flow

    def start(self, flow: Flow) -> None:
        self.flow = flow
        self.size = 0
        self.reported = False

    def block(self, blk: FBlock, env: _Env) -> FBlock:
        stmts: list[FStmt] = []
        for s in blk.stmts:
            stmts.extend(self.stmt(s, env))
        return FBlock(tuple(stmts), blk.span)

    def stmt(self, s: FStmt, env: _Env) -> list[FStmt]:
        self.size += 1  # subflow calls too: expanding them is the work bounded
        if self.size > MAX_STATEMENTS:
            self.too_big(s, f"holds more than {MAX_STATEMENTS:,} statements", "", env)
            return []
        if isinstance(s, For | Repeat | Match | OptionMatch | If):
            loop = isinstance(s, For | Repeat)
            env = dataclasses.replace(env, blocks=env.blocks + 1, loops=env.loops + loop)
            if env.blocks > MAX_BLOCKS:
                self.too_big(s, f"nests statements more than {MAX_BLOCKS} deep", "", env)
                return []
            if env.loops > MAX_LOOPS:
                self.too_big(
                    s,
                    f"nests more than {MAX_LOOPS} `for`/`repeat` loops",
                    "the generated conductor is Python, which allows at most 20 nested loops "
                    "in one function",
                    env,
                )
                return []
        if isinstance(s, WalkCall):
            if s.walk in self.subflows:
                return self.call(s, env)
            args = tuple(self.arg(a, env) for a in s.args)
            via = s.via or tuple(env.stack)
            return [dataclasses.replace(s, args=args, via=via)]
        if isinstance(s, For):
            var = s.var
            if env.stack and var in env.segvars:  # the caller binds it too: rename
                self.counter += 1
                var = f"{s.var}_{self.counter}"
            # the body's own `for` variable hides a parameter of its name
            renames = {**env.renames, s.var: var} if env.stack else env.renames
            subst = {k: v for k, v in env.subst.items() if k != s.var}
            inner = _Env(subst, renames, env.segvars | {var}, env.stack, env.blocks, env.loops)
            return [For(var, self.block(s.body, inner), s.span)]
        if isinstance(s, Match):
            var = self.segment(s.var, env, s.span)
            arms = tuple(Arm(a.patterns, self.block(a.body, env), a.span) for a in s.arms)
            return [Match(var, arms, s.span)]
        if isinstance(s, OptionMatch):
            arms = tuple(
                OptionArm(a.values, a.default, self.block(a.body, env), a.span) for a in s.arms
            )
            return [OptionMatch(s.option, arms, s.span)]
        if isinstance(s, If):
            else_ = self.block(s.else_, env) if s.else_ is not None else None
            return [If(s.cond, self.block(s.then, env), else_, s.span)]
        if isinstance(s, Repeat):
            return [Repeat(s.count, self.block(s.body, env), s.span)]
        return [s]

    # ---------------------------------------------------------------- one subflow call
    def call(self, c: WalkCall, env: _Env) -> list[FStmt]:
        sub = self.subflows[c.walk]
        self.called.add(sub.name)
        if any(name == sub.name for name, _ in env.stack):
            self.recursion(c, sub, env)
            return []
        if len(env.stack) >= MAX_BLOCKS:
            self.too_big(c, f"nests subflow calls more than {MAX_BLOCKS} deep", "", env)
            return []
        given: dict[str, FArg] = {}
        for a in c.args:
            if a.param in given:
                self.diags.append(
                    diag(
                        "WG112",
                        f"argument `{a.param}` is passed twice to subflow `{sub.name}`",
                        a.span,
                        label="again here",
                        labels=[Label(given[a.param].span, "first passed here")],
                        help="pass each parameter once",
                    )
                )
            elif a.param not in sub.params:
                self.unknown_param(c, a, sub)
            else:
                given[a.param] = self.arg(a, env)
        missing = [p for p in sub.params if p not in given]
        if missing:
            self.missing(c, sub, missing)
            return []
        wrong = [p for p in _segment_params(sub) if not self.is_segment(given[p], env)]
        for p in wrong:
            self.not_a_segment(sub, p, given[p])
        if wrong:
            return []
        # the body's own scope: its parameters, and the caller's `for` variables only to avoid
        # capturing them (see `stmt`, `For`)
        inner = _Env(
            given, {}, env.segvars, ((sub.name, c.span), *env.stack), env.blocks, env.loops
        )
        return list(self.block(sub.body, inner).stmts)

    def arg(self, a: FArg, env: _Env) -> FArg:
        """``a`` with the parameters and renamed variables of ``env`` substituted."""
        if a.kind is ArgKind.NAME:
            if a.name in env.renames:
                return dataclasses.replace(a, name=env.renames[a.name])
            if a.name in env.subst:
                v = env.subst[a.name]
                return FArg(a.param, v.kind, v.name, v.attr, a.span)
            return a
        if a.kind is ArgKind.SEGMENT_FIELD:
            return dataclasses.replace(a, name=self.segment(a.name, env, a.span))
        return a

    def segment(self, var: str, env: _Env, at: Span) -> str:
        """The `for` variable a segment name ``var`` stands for after substitution (`call`
        expands a subflow only when every parameter used as a segment is passed one)."""
        if var in env.renames:
            return env.renames[var]
        v = env.subst.get(var)
        return v.name if v is not None else var

    @staticmethod
    def is_segment(v: FArg, env: _Env) -> bool:
        return v.kind is ArgKind.NAME and v.name in env.segvars

    def not_a_segment(self, sub: Subflow, param: str, v: FArg) -> None:
        what = {
            ArgKind.OPTION: f"`option.{v.name}`",
            ArgKind.FIRST: f"`request.first({v.name})`",
            ArgKind.SEGMENT_FIELD: f"`{v.name}.{v.attr}`",
        }.get(v.kind, f"`{v.name}`, a persisted channel")
        use = _segment_uses(sub.body, param)
        self.diags.append(
            diag(
                "WG705",
                f"subflow `{sub.name}` uses parameter `{param}` as an input segment, but this "
                f"call passes {what}",
                v.span,
                label="not an input segment",
                labels=[Label(use, f"`{param}` is used as a segment here")] if use else [],
                help=f"pass a `for` variable (`{sub.name}({param} = seg)`), or use `{param}` "
                "in the subflow only as a walk argument",
            )
        )

    # ---------------------------------------------------------------- diagnostics
    def too_big(self, s: FStmt, what: str, note: str, env: _Env) -> None:
        if self.reported:
            return
        self.reported = True
        self.called.update(self.subflows)  # what was not expanded is not unused (no WG908)
        self.diags.append(
            diag(
                "WG708",
                f"flow `{self.flow.name}` {what}"
                + (" once its subflows are expanded" if env.stack else ""),
                s.span,
                label="past the limit here",
                labels=[Label(self.flow.name_span or self.flow.span, f"flow `{self.flow.name}`")],
                help="run the inner part from a flow of its own, or flatten the nesting",
                notes=(note,) if note else (),
            )
        )

    def recursion(self, c: WalkCall, sub: Subflow, env: _Env) -> None:
        chain = [name for name, _ in reversed(env.stack)] + [sub.name]
        self.diags.append(
            diag(
                "WG117",
                f"subflow `{sub.name}` calls itself"
                + (f" (through {_names(chain[1:-1])})" if len(chain) > 2 else ""),
                c.span,
                label="called again here",
                labels=[Label(sub.name_span or sub.span, f"`{sub.name}` declared here")],
                help="a subflow is expanded where it is called, so it cannot recurse; repeat "
                "it with `repeat N { ... }` or `for` instead",
            )
        )

    def unknown_param(self, c: WalkCall, a: FArg, sub: Subflow) -> None:
        listed = ", ".join(f"`{p}`" for p in sub.params) or "none"
        self.diags.append(
            diag(
                "WG116",
                f"subflow `{sub.name}` has no parameter `{a.param}`",
                a.span,
                label="unknown parameter",
                labels=[Label(sub.name_span or sub.span, f"`{sub.name}` declared here")],
                help=f"its parameters: {listed}",
            )
        )

    def missing(self, c: WalkCall, sub: Subflow, missing: list[str]) -> None:
        example = ", ".join(f"{p} = ..." for p in missing)
        self.diags.append(
            diag(
                "WG116",
                f"subflow `{sub.name}` is called without {_names(missing)}",
                Span(c.span.file, c.span.line, c.span.col, c.span.line, c.span.col + len(c.walk)),
                label=f"missing {_names(missing)}",
                labels=[Label(sub.name_span or sub.span, f"`{sub.name}` declared here")],
                help=f"pass every parameter: `{sub.name}({example})`",
            )
        )


def _segment_params(sub: Subflow) -> list[str]:
    """The parameters the body uses as segments (`match p.modality`, `p.FIELD`)."""
    return [p for p in sub.params if _segment_uses(sub.body, p) is not None]


def _segment_uses(blk: FBlock, var: str) -> Span | None:
    """Where ``blk`` first uses ``var`` as a segment (not under a `for` that rebinds it)."""
    for s in blk.stmts:
        if isinstance(s, Match) and s.var == var:
            return s.span
        if isinstance(s, WalkCall):
            for a in s.args:
                if a.kind is ArgKind.SEGMENT_FIELD and a.name == var:
                    return a.span
        inner: list[FBlock] = []
        if (isinstance(s, For) and s.var != var) or isinstance(s, Repeat):
            inner = [s.body]
        elif isinstance(s, Match | OptionMatch):
            inner = [a.body for a in s.arms]
        elif isinstance(s, If):
            inner = [s.then] + ([s.else_] if s.else_ is not None else [])
        for b in inner:
            found = _segment_uses(b, var)
            if found is not None:
                return found
    return None


def _names(names: list[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
