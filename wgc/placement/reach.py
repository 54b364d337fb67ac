"""What a placement has to place, and where it places it: the questions rules and lowering share.

* `reachable_walks`: the walks a flow can run under this placement. Flow conditions are
  three-valued here: `placed(NODE)` and `true`/`false` are known once the placement is, so the
  branch they rule out is skipped (BAGEL runs `image_gen_cfg` only where the CFG nodes are placed);
  request predicates and options are unknown, so both branches count. Any `extern` flow (a Python
  generator) may run every walk.
* `required_pairs`: every (walk, node) a reachable walk calls, with the first call's span.
* `candidates`: the indices of the groups that place a (walk, node).
* `assignment`: the one group each required pair runs on (the first candidate; the placement's
  default ranks for nodes an M* file never names), which is what lowering uses.
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Span
from wgc.ir.flow import (
    BoolOp,
    Cond,
    Const,
    FBlock,
    FlowKind,
    For,
    If,
    Match,
    Not,
    Placed,
    Repeat,
    WalkCall,
)
from wgc.ir.model import Model
from wgc.placement.model import Group, Named, Placement

Pair = tuple[str, str]  # (walk, node)


def reachable_walks(model: Model, placement: Placement) -> frozenset[str]:
    known = {w.name for w in model.walks}
    if any(f.kind is FlowKind.EXTERN for f in model.flows):
        return frozenset(known)
    out: set[str] = set()
    for flow in model.flows:
        if flow.when is not None and truth(flow.when, placement) is False:
            continue
        if flow.body is not None:
            _visit(flow.body, placement, out)
    return frozenset(out & known)


def _visit(block: FBlock, placement: Placement, out: set[str]) -> None:
    for s in block.stmts:
        if isinstance(s, WalkCall):
            out.add(s.walk)
        elif isinstance(s, For | Repeat):
            _visit(s.body, placement, out)
        elif isinstance(s, Match):
            for arm in s.arms:
                _visit(arm.body, placement, out)
        elif isinstance(s, If):
            t = truth(s.cond, placement)
            if t is not False:
                _visit(s.then, placement, out)
            if t is not True and s.else_ is not None:
                _visit(s.else_, placement, out)


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
    return [i for i, g in enumerate(placement.groups) if g.places(walk, node)]


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
