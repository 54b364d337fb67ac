"""The capture plan: shape-static units the runtime may record as CUDA graphs, per batch bucket.

* scope ``loop``: a loop whose body holds no nested loop, sits wholly on one rank, and whose
  calls' ports are all static: one graph per iteration of the whole body.
* scope ``call``: otherwise every call inside a loop whose ports are all static, one graph each.
* never: a call or loop inside an ``eager`` loop (eager opts out of static shapes), calls outside
  loops (they run once per request: capture would not pay for itself), or anything when the
  placement lists no capture buckets.
"""

from __future__ import annotations

from wgc.lower.pieces import LoweredWalk
from wgc_runtime.contract.kinds import CaptureScope
from wgc_runtime.contract.spec import CallSpec, CaptureSpec, TypeSpec


def _ports(call: CallSpec) -> list[tuple[str, TypeSpec | None]]:
    return [(f"{call.id}#{p.port}", p.type) for p in call.inputs] + [
        (f"{call.id}#{p.port}", p.type) for p in call.outputs
    ]


def _static(ports) -> bool:
    return all(t is not None and t.is_static for _, t in ports)


def captures(walk: LoweredWalk, buckets: tuple[int, ...]) -> list[CaptureSpec]:
    if not buckets:
        return []
    w = walk.walk
    eager = {lp.name for lp in w.loops if lp.eager}
    nested = {parent for parent in walk.parents.values() if parent is not None}
    covered: set[int] = set()
    out: list[CaptureSpec] = []
    for lp in w.loops:
        ranks = walk.loop_ranks.get(lp.name, ())
        chain = _chain(walk, lp.name)
        if len(ranks) != 1 or lp.name in nested or eager & set(chain):
            continue
        calls = [c for _, c in sorted(walk.calls.items()) if lp.name in c.loops]
        ports = [p for c in calls for p in _ports(c)]
        if not calls or not _static(ports):
            continue
        covered.update(c.id for c in calls)
        out.append(
            CaptureSpec(
                walk=w.name,
                rank=ranks[0],
                scope=CaptureScope.LOOP,
                loop=lp.name,
                calls=tuple(c.id for c in calls),
                nodes=tuple(dict.fromkeys(c.node for c in calls)),
                ports=_typed(ports),
                buckets=buckets,
            )
        )
    for cid, c in sorted(walk.calls.items()):
        if cid in covered or not c.loops or eager & set(c.loops):
            continue
        ports = _ports(c)
        if _static(ports):
            out.append(
                CaptureSpec(
                    walk=w.name,
                    rank=c.rank,
                    scope=CaptureScope.CALL,
                    calls=(cid,),
                    nodes=(c.node,),
                    ports=_typed(ports),
                    buckets=buckets,
                )
            )
    return out


def _typed(ports) -> tuple[tuple[str, TypeSpec], ...]:
    return tuple((name, t) for name, t in ports if t is not None)


def _chain(walk: LoweredWalk, loop: str) -> list[str]:
    """``loop`` and its enclosing loops."""
    out = []
    cur: str | None = loop
    while cur is not None and cur not in out:
        out.append(cur)
        cur = walk.parents.get(cur)
    return out
