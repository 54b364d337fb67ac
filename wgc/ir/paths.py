"""Path conditions of flows: what is known about the request where a flow statement runs.

A flow's branches test facts about one request that do not change while it runs: the input
modalities it has (`request.has`, `request.count`), the outputs it wants, its options, and the
placement (`placed(NODE)`); inside a `for`, the current segment's modality (`match seg.modality`).
Following them makes the flow analyses path-sensitive: after `if not request.has(audio) { fail
... }` the rest of the flow knows the request has audio, and inside `if request.has(text)` a
value persisted only when there is text is known to be there.

Conditions are kept in disjunctive normal form: a `DNF` is a set of terms (OR), a term a set of
literals (AND), a literal an atom with its truth. `TRUE` is the one empty term, `FALSE` no term.
Terms that contradict themselves (an atom both ways, one option equal to two values, one segment
of two modalities, an option with listed values equal to none of them) are dropped. What a
placement decides (``known``) is folded in.

Sizes are capped (`LIMIT` terms). A path condition is an over-approximation (more paths than
real is safe: it only makes the analyses more cautious), so a path too large collapses to what
all its terms share; a guard ("persisted when ...") is an under-approximation, so a guard too
large loses terms. `PathWalker` follows a flow's statements with these rules; the `flows` pass
and the placement's reachability (`wgc.placement.reach`) build on it.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from wgc.ir.expr import Value
from wgc.ir.flow import (
    MODALITIES,
    Arm,
    BoolOp,
    Cond,
    Const,
    Fail,
    FBlock,
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
    WalkCall,
)

# ("has", m) ("wants", m) ("opt", name) ("eq", name, v) ("cmp", name, op, v) ("count", m, op, n)
# ("placed", node) ("mod", var, m) ("param", name, op, v): its kind, then parts read by position
Atom: TypeAlias = tuple[Any, ...]
Lit = tuple[Atom, bool]
Term = frozenset[Lit]
DNF = frozenset[Term]

TRUE: DNF = frozenset({frozenset()})
FALSE: DNF = frozenset()
LIMIT = 64

_OPS: dict[str, Callable[[Any, Any], object]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


def compare(op: str, a: object, b: object) -> bool:
    try:
        return bool(_OPS[op](a, b))
    except TypeError:
        return False


class Algebra:
    """Conditions over one model's request facts. ``choices``: option -> its listed values (an
    option without any is absent); ``bools``: the `bool` options; ``known``: atoms the
    placement decides."""

    def __init__(
        self,
        choices: Mapping[str, tuple[Value, ...]] | None = None,
        bools: Iterable[str] = (),
        known: Mapping[Atom, bool] | None = None,
    ) -> None:
        self.choices = dict(choices or {})
        self.bools = frozenset(bools)
        self.known = dict(known or {})

    # ---------------------------------------------------------------- literals and terms
    def lit(self, atom: Atom, truth: bool = True) -> DNF:
        if atom in self.known:
            return TRUE if self.known[atom] == truth else FALSE
        if atom[0] == "eq" and atom[1] in self.choices and atom[2] not in self.choices[atom[1]]:
            return FALSE if truth else TRUE
        return frozenset({frozenset({(atom, truth)})})

    def consistent(self, term: Term) -> bool:
        values: dict[str, object] = {}
        mods: dict[str, str] = {}
        not_eq: dict[str, set[object]] = {}
        for atom, truth in term:
            if (atom, not truth) in term:
                return False
            kind = atom[0]
            if kind == "eq" and truth:
                if values.setdefault(atom[1], atom[2]) != atom[2]:
                    return False
            elif kind == "eq":
                not_eq.setdefault(atom[1], set()).add(atom[2])
            elif kind == "mod" and truth and mods.setdefault(atom[1], atom[2]) != atom[2]:
                return False
        for atom, truth in term:  # an option equal to a value decides its comparisons
            decided = atom[0] == "cmp" and atom[1] in values
            if decided and compare(atom[2], values[atom[1]], atom[3]) != truth:
                return False
        for name, excluded in not_eq.items():
            if name in values and values[name] in excluded:
                return False
            listed = self.choices.get(name)
            if listed and set(listed) <= excluded:
                return False
        return True

    def entails(self, term: Term, lit: Lit) -> bool:
        """Whether every request satisfying ``term`` satisfies ``lit``."""
        if lit in term:
            return True
        atom, truth = lit
        kind = atom[0]
        if kind == "eq":
            others = [a for a, t in term if t and a[0] == "eq" and a[1] == atom[1]]
            if not truth:
                return any(a[2] != atom[2] for a in others)
            listed = self.choices.get(atom[1], ())
            excluded = {a[2] for a, t in term if not t and a[0] == "eq" and a[1] == atom[1]}
            return bool(listed) and set(listed) - excluded == {atom[2]}
        if kind == "mod" and not truth:
            return any(t and a[0] == "mod" and a[1] == atom[1] and a[2] != atom[2] for a, t in term)
        if kind == "has" and truth:
            return any(t and a[0] == "mod" and a[2] == atom[1] for a, t in term)
        if kind == "cmp":
            value = next((a[2] for a, t in term if t and a[0] == "eq" and a[1] == atom[1]), None)
            return value is not None and compare(atom[2], value, atom[3]) == truth
        return False

    def implies(self, p: DNF, g: DNF) -> bool:
        """Whether ``p`` implies ``g``: every term of ``p`` entails every literal of some term of
        ``g`` (sufficient, not complete)."""
        return all(any(all(self.entails(t, lit) for lit in gt) for gt in g) for t in p)

    # ---------------------------------------------------------------- connectives
    def and_(self, a: DNF | None, b: DNF | None, over: bool = True) -> DNF | None:
        """``a and b``; None (unknown) when a side is. ``over``: collapse a result past `LIMIT`
        (a path), else drop terms (a guard)."""
        if a is None or b is None:
            return None
        if len(a) * len(b) > 4 * LIMIT:  # too many products to look at: cap first
            a, b = self._cap(a, over, LIMIT // 8), self._cap(b, over, LIMIT // 8)
        terms = {x | y for x, y in itertools.product(a, b)}
        return self._cap(frozenset(t for t in terms if self.consistent(t)), over)

    def or_(self, a: DNF, b: DNF, over: bool = True) -> DNF:
        return self._cap(a | b, over)

    def _cap(self, d: DNF, over: bool, limit: int = LIMIT) -> DNF:
        d = _absorb(d)
        if len(d) <= 4 * LIMIT:
            d = _absorb(_resolve(d))
        if len(d) <= limit:
            return d
        if over:
            return frozenset({self.common(d)})
        return frozenset(sorted(d, key=lambda t: (len(t), sorted(map(repr, t))))[:limit])

    def common(self, d: DNF) -> Term:
        """The literals every term of ``d`` has (what holds on every path)."""
        return next(iter(d)).intersection(*d) if d else frozenset()

    # ---------------------------------------------------------------- conditions
    def cond(self, c: Cond, truth: bool = True) -> DNF | None:
        """The exact DNF of ``c`` (or of ``not c``); None when it would pass `LIMIT`."""
        if isinstance(c, Not):
            return self.cond(c.operand, not truth)
        if isinstance(c, BoolOp):
            left, right = self.cond(c.left, truth), self.cond(c.right, truth)
            if left is None or right is None:
                return None
            if (c.op == "and") == truth:
                d = self.and_(left, right)
                return d if d is not None and len(d) < LIMIT else None
            d = _absorb(left | right)
            return d if len(d) < LIMIT else None
        if isinstance(c, Const):
            return TRUE if c.value == truth else FALSE
        if isinstance(c, RequestPred):
            return self.lit((c.pred, c.modality), truth)
        if isinstance(c, Placed):
            return self.lit(("placed", c.node), truth)
        if isinstance(c, ParamCmp):  # the placement's value decides: either way here
            return self.lit(("param", c.name, c.op, repr(c.value)), truth)
        if isinstance(c, OptionCond):
            return self.lit(("opt", c.name), truth)
        if isinstance(c, OptionCmp):
            return self.option_cmp(c.name, c.op, c.value, truth)
        return self.count_cmp(c.modality, c.op, c.value, truth)  # the last kind: a `CountCmp`

    def option_cmp(self, name: str, op: str, value: Value | None, truth: bool) -> DNF:
        if value is None:  # did not build (reported): anything may hold
            return self.lit(("cmp", name, op, None), truth)
        if name in self.bools and op in ("==", "!="):
            return self.lit(("opt", name), (value is True) == (op == "==") == truth)
        if op in ("==", "!="):
            return self.lit(("eq", name, value), (op == "==") == truth)
        listed = self.choices.get(name)
        if listed:  # an ordering of a listed option: the values it keeps
            kept = [v for v in listed if compare(op, v, value) == truth]
            return _absorb(FALSE.union(*(self.lit(("eq", name, v)) for v in kept)))
        return self.lit(("cmp", name, op, value), truth)

    def count_cmp(self, modality: str, op: str, n: int | None, truth: bool) -> DNF:
        has = ("has", modality)
        if n is None:
            return self.lit(("count", modality, op, None), truth)
        zero = compare(op, 0, n) == truth
        # `k OP n` over k >= 1 changes only around n: those counts decide it
        rest = {compare(op, k, n) == truth for k in {1, 2, n - 1, n, n + 1} if k >= 1}
        if rest == {not zero}:  # the count only says whether there is a segment
            return self.lit(has, not zero)
        opaque = self.lit(("count", modality, op, n), truth)
        return opaque if zero else (self.and_(opaque, self.lit(has)) or FALSE)

    # ---------------------------------------------------------------- match arms
    def modality_arms(self, var: str, arms: list[tuple[str, ...]]) -> tuple[list[DNF], DNF]:
        """The exact condition of each arm of `match VAR.modality` (first match wins, `_` takes
        the rest), and of no arm matching."""
        left: list[str] = list(MODALITIES)
        out: list[DNF] = []
        for patterns in arms:
            mine = left if "_" in patterns else [m for m in left if m in patterns]
            out.append(self._segment_is(var, mine))
            left = [m for m in left if m not in mine]
        return out, self._segment_is(var, left)

    def _segment_is(self, var: str, modalities: list[str]) -> DNF:
        out: DNF = FALSE
        for m in modalities:
            d = self.and_(self.lit(("mod", var, m)), self.lit(("has", m)))
            out = out | (d or FALSE)
        return out

    def option_arms(
        self, name: str, arms: list[tuple[tuple[Value, ...], bool]]
    ) -> tuple[list[DNF], DNF]:
        """The same for `match option.NAME` (``arms``: each arm's values and whether it is
        `_`)."""
        named: list[Value] = []
        out: list[DNF] = []
        for values, default in arms:
            if default:  # `_` takes everything left, and later arms never run
                out.append(self._none_of(name, named))
                out += [FALSE] * (len(arms) - len(out))
                return out, FALSE
            mine = [v for v in values if v not in named]
            out.append(_absorb(FALSE.union(*(self.option_cmp(name, "==", v, True) for v in mine))))
            named += mine
        return out, self._none_of(name, named)

    def _none_of(self, name: str, named: list[Value]) -> DNF:
        listed = (True, False) if name in self.bools else self.choices.get(name)
        if listed:
            rest = [v for v in listed if v not in named]
            return _absorb(FALSE.union(*(self.option_cmp(name, "==", v, True) for v in rest)))
        out: DNF | None = TRUE
        for v in named:
            out = self.and_(out, self.option_cmp(name, "==", v, False))
        return out or FALSE

    # ---------------------------------------------------------------- leaving a `for`
    def for_exit(self, entry: DNF, body: DNF, var: str) -> DNF:
        """The path after `for VAR in request.inputs` (the body ran for every segment, at least
        once): the entry's, plus what every way through the body shares, plus, for each
        modality no way through the body accepts, that the request has none."""
        shared = frozenset(lit for lit in self.common(body) if not _mentions(lit, var))
        gone = [
            m for m in MODALITIES if all(self.entails(t, (("mod", var, m), False)) for t in body)
        ]
        extra = frozenset(shared | {(("has", m), False) for m in gone})
        return self.and_(entry, frozenset({extra})) or FALSE

    def for_guard(self, guard: DNF, var: str) -> DNF:
        """A guard true at the end of one iteration, as a guard after the loop: a term about the
        segment holds for some iteration when the request has a segment of that modality."""
        out: set[Term] = set()
        for t in guard:
            seg = {lit for lit in t if _mentions(lit, var)}
            rest = t - seg
            mods = {lit[0][2] for lit in seg if lit[1]}
            if not seg:
                out.add(rest)
            elif len(mods) == 1:
                out.add(rest | {(("has", mods.pop()), True)})
        return self._cap(frozenset(out), over=False)


def _mentions(lit: Lit, var: str) -> bool:
    return lit[0][0] == "mod" and lit[0][1] == var


def _absorb(d: DNF) -> DNF:
    """Drop every term a smaller term of ``d`` already covers (``a or (a and b)`` is ``a``)."""
    terms = sorted(d, key=len)
    kept: list[Term] = []
    for t in terms:
        if not any(k <= t for k in kept):
            kept.append(t)
    return frozenset(kept)


def _resolve(d: DNF) -> DNF:
    """Merge terms that differ in one literal's truth (``(a and b) or (a and not b)`` is
    ``a``), until none do."""
    terms = set(d)
    work = list(terms)
    while work:
        t = work.pop()
        if t not in terms:
            continue
        for atom, truth in t:
            twin = (t - {(atom, truth)}) | {(atom, not truth)}
            if twin in terms:
                merged = t - {(atom, truth)}
                terms -= {t, twin}
                if merged not in terms:
                    terms.add(merged)
                    work.append(merged)
                break
    return frozenset(terms)


# ---------------------------------------------------------------- following a flow


@dataclass(frozen=True)
class State:
    """Where a flow is: ``path`` (an over-approximation of what holds there)."""

    path: DNF


Where: TypeAlias = "Arm | OptionArm | FBlock | FStmt"  # a way, or the statement (taking none)
Way: TypeAlias = "tuple[FBlock, DNF | None, Where]"  # a body, its exact condition, its IR node
Exit: TypeAlias = "tuple[State | None, DNF | None, Where]"  # the state after it (None: none)


class PathWalker:
    """Follows flow statements with their path conditions. Subclasses keep more in their states
    (`State` subclasses) and override `call`, `merge`, `for_exit` and `repeat_exit`."""

    def __init__(self, algebra: Algebra) -> None:
        self.alg = algebra

    def block(self, blk: FBlock, st: State | None) -> State | None:
        for s in blk.stmts:
            if st is None or not st.path:
                return None  # no request gets here
            st = self.stmt(s, st)
        return st if st is None or st.path else None

    def stmt(self, s: FStmt, st: State) -> State | None:
        if isinstance(s, WalkCall):
            return self.call(s, st)
        if isinstance(s, Fail):
            return None
        if isinstance(s, For):
            body = self.block(s.body, st)  # at least once: a request has an input segment
            return None if body is None else self.for_exit(st, body, s.var)
        if isinstance(s, Match):
            conds, none = self.alg.modality_arms(s.var, [a.patterns for a in s.arms])
            return self.branches(
                st, [(a.body, c, a) for a, c in zip(s.arms, conds, strict=True)], none, s
            )
        if isinstance(s, OptionMatch):
            conds, none = self.alg.option_arms(s.option, [(a.values, a.default) for a in s.arms])
            return self.branches(
                st, [(a.body, c, a) for a, c in zip(s.arms, conds, strict=True)], none, s
            )
        if isinstance(s, If):
            then, other = self.alg.cond(s.cond), self.alg.cond(s.cond, False)
            ways: list[Way] = [(s.then, then, s.then)]
            if s.else_ is not None:
                return self.branches(st, [*ways, (s.else_, other, s.else_)], FALSE, s)
            return self.branches(st, ways, other, s)
        return self.repeat_exit(s, st, self.block(s.body, st))  # the last kind: a `Repeat`

    def branches(self, st: State, ways: list[Way], skip: DNF | None, where: Where) -> State | None:
        """Run each way (body, exact condition or None, its IR node) from ``st``; ``skip``: the
        condition of taking none (FALSE when some way is always taken)."""
        exits: list[Exit] = []
        for body, cond, node in ways:
            entry = self.restrict(st, cond)
            exits.append((None if entry is None else self.block(body, entry), cond, node))
        if skip is None or skip:
            exits.append((self.restrict(st, skip), skip, where))
        return self.merge(exits)

    def restrict(self, st: State, cond: DNF | None) -> State | None:
        path = st.path if cond is None else self.alg.and_(st.path, cond)
        return self.with_path(st, path) if path else None

    # ---------------------------------------------------------------- overridable
    def with_path(self, st: State, path: DNF) -> State:
        return State(path)

    def call(self, c: WalkCall, st: State) -> State | None:
        return st

    def merge(self, exits: list[Exit]) -> State | None:
        live = [e for e, _, _ in exits if e is not None]
        if not live:
            return None
        path = FALSE
        for e in live:
            path = self.alg.or_(path, e.path)
        return self.with_path(live[0], path)

    def for_exit(self, entry: State, body: State, var: str) -> State | None:
        return self.with_path(body, self.alg.for_exit(entry.path, body.path, var))

    def runs(self, s: Repeat) -> bool:
        """Whether the `repeat` surely runs its body (a static positive count)."""
        return False

    def repeat_exit(self, s: Repeat, entry: State, body: State | None) -> State | None:
        if self.runs(s):
            return body
        if body is None:
            return entry  # runs zero times, or fails
        return self.with_path(entry, self.alg.or_(entry.path, body.path))
