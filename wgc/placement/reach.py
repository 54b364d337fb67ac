"""What a placement has to place, and where it places it: the questions rules and lowering share.

* `reachable_walks`: the walks a flow can run under this placement, following its path
  conditions (`wgc.ir.paths`): `placed(NODE)` and `true`/`false` are known once the placement
  is, so the branch they rule out is skipped (BAGEL runs `image_gen_cfg` only where the CFG
  nodes are placed); request predicates and options are unknown per request, but a branch that
  contradicts what the path already knows is skipped too: after `if not placed(X) { fail ... }`
  nothing runs when `X` is not placed, and after `if not request.has(image) { fail ... }` the
  `else` of `if request.has(image)` never runs. Any `extern` flow (a Python generator) may run
  every walk.
* `required_pairs`: every (walk, node) a reachable walk calls, with the first call's span.
* `candidates`: the indices of the groups that place a (walk, node).
* `assignment`: the one group each required pair runs on (the first candidate; the placement's
  default ranks for nodes an M* file never names), which is what lowering uses.
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Span
from wgc.ir import expr as E
from wgc.ir.flow import (
    BoolOp,
    Cond,
    Const,
    FlowKind,
    If,
    Not,
    Placed,
    Repeat,
    WalkCall,
    cond_atoms,
    iter_fstmts,
)
from wgc.ir.model import Model
from wgc.ir.paths import TRUE, Algebra, PathWalker, State
from wgc.placement.model import Group, Named, Placement

Pair = tuple[str, str]  # (walk, node)


def reachable_walks(model: Model, placement: Placement) -> frozenset[str]:
    known = {w.name for w in model.walks}
    if any(f.kind is FlowKind.EXTERN for f in model.flows):
        return frozenset(known)
    walker = _Reach(_algebra(model, placement), model.param_values())
    for flow in model.flows:
        start = walker.alg.cond(flow.when) if flow.when is not None else TRUE
        if start is not None and not start:
            continue  # the placement rules the flow out
        if flow.body is not None:
            walker.block(flow.body, State(start if start is not None else TRUE))
    return frozenset(walker.called & known)


def _algebra(model: Model, placement: Placement) -> Algebra:
    """Conditions over ``model``'s request facts, with `placed(NODE)` decided by ``placement``."""
    placed = {a.node for f in model.flows for a in _placed_atoms(f)}
    known = {("placed", n): placement.placed(n) for n in placed}
    choices = {o.name: o.choices for o in model.options if o.choices}
    bools = [o.name for o in model.options if o.type == "bool"]
    return Algebra(choices, bools, known)


def _placed_atoms(flow):
    if flow.when is not None:
        yield from (a for a in cond_atoms(flow.when) if isinstance(a, Placed))
    if flow.body is not None:
        for s in iter_fstmts(flow.body):
            if isinstance(s, If):
                yield from (a for a in cond_atoms(s.cond) if isinstance(a, Placed))


class _Reach(PathWalker):
    """The walks called on some path a request can take under the placement: a branch that
    `placed(...)` rules out, or that an earlier `fail` (or branch) excludes, calls nothing."""

    def __init__(self, alg: Algebra, params: dict) -> None:
        super().__init__(alg)
        self.params = params
        self.called: set[str] = set()

    def call(self, c: WalkCall, st: State) -> State:
        self.called.add(c.walk)
        return st

    def runs(self, s: Repeat) -> bool:
        if not E.is_static(s.count, self.params):
            return False
        try:
            v = E.evaluate(s.count, self.params)
        except E.EvalError:
            return False
        return isinstance(v, int) and not isinstance(v, bool) and v > 0


def truth(cond: Cond, placement: Placement) -> bool | None:
    """The condition's value if the placement decides it, else None (known only per request)."""
    if isinstance(cond, Placed):
        return placement.placed(cond.node)
    if isinstance(cond, Const):
        return cond.value
    if isinstance(cond, Not):
        t = truth(cond.operand, placement)
        return None if t is None else not t
    if isinstance(cond, BoolOp):
        left, right = truth(cond.left, placement), truth(cond.right, placement)
        if cond.op == "and":
            if left is False or right is False:
                return False
            return True if left and right else None
        if left is True or right is True:
            return True
        return False if left is False and right is False else None
    return None


def required_pairs(model: Model, placement: Placement) -> dict[Pair, Span]:
    """Every (walk, node) a reachable walk calls (nodes the model declares), in source order."""
    out: dict[Pair, Span] = {}
    reach = reachable_walks(model, placement)
    for w in model.walks:
        if w.name not in reach or model.walk(w.name) is not w:
            continue
        for c in w.calls:
            if model.node(c.node) is not None:
                out.setdefault((w.name, c.node), c.name_span or c.span)
    return out


def candidates(placement: Placement, walk: str, node: str) -> list[int]:
    return [i for i in placement.by_node.get(node, ()) if placement.groups[i].places(walk, node)]


def default_group(placement: Placement, node: str) -> Group | None:
    """The implicit group a node no group names runs on (M*: rank 0); None in wgc's format, and
    for a node some group names (for other walks): naming a node takes it off the default."""
    if not placement.default_ranks or placement.placed(node):
        return None
    ranks = placement.default_ranks
    return Group(
        nodes=(Named(node, placement.span),),
        ranks=ranks,
        walks=None,
        tp=len(ranks),
        span=placement.span,
    )


def assignment(model: Model, placement: Placement) -> dict[Pair, Group]:
    """The group each required (walk, node) runs on; pairs with no group are left out."""
    out: dict[Pair, Group] = {}
    for walk, node in required_pairs(model, placement):
        found = candidates(placement, walk, node)
        group = placement.groups[found[0]] if found else default_group(placement, node)
        if group is not None:
            out[(walk, node)] = group
    return out
