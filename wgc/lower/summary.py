"""Per walk, what crosses ranks: the table `wgc show --placement` prints.

For each walk with at least one transfer: the transfers once per request and those of every
loop iteration, with the total bytes of each (None when some shape is dynamic).
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.lower.plan import Plan, Transfer


@dataclass(frozen=True, slots=True)
class LoopTraffic:
    loop: str
    transfers: tuple[Transfer, ...]
    nbytes: int | None  # per iteration


@dataclass(frozen=True, slots=True)
class WalkTraffic:
    walk: str
    per_request: tuple[Transfer, ...]
    request_bytes: int | None
    per_iteration: tuple[LoopTraffic, ...]  # loops in the walk's source order


def _total(ts) -> int | None:
    total = 0
    for t in ts:
        if t.nbytes is None:
            return None
        total += t.nbytes
    return total


def cross_rank_summary(plan: Plan) -> list[WalkTraffic]:
    by_walk: dict[str, list[Transfer]] = {}
    for t in plan.transfers:
        by_walk.setdefault(t.walk, []).append(t)
    loop_order = _loop_order(plan)
    out = []
    for w in plan.walks:
        ts = by_walk.get(w.name)
        if not ts:
            continue
        once = tuple(t for t in ts if t.per == "request")
        loops: dict[str, list[Transfer]] = {}
        for t in ts:
            if t.per == "iteration":
                loops.setdefault(t.loop or "", []).append(t)
        order = loop_order.get(w.name, {})
        per_it = tuple(
            LoopTraffic(lp, tuple(loops[lp]), _total(loops[lp]))
            for lp in sorted(loops, key=lambda n: (order.get(n, len(order)), n))
        )
        out.append(WalkTraffic(w.name, once, _total(once), per_it))
    return out


def _loop_order(plan: Plan) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in plan.ranks:
        for p in r.pieces:
            order = out.setdefault(p.walk, {})
            for lp in p.loops:
                order.setdefault(lp.name, len(order))
    return out
