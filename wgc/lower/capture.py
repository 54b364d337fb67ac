"""The capture plan: shape-static units the runtime may record as CUDA graphs, per batch bucket.

* scope ``loop``: a loop whose body holds no nested loop, sits wholly on one rank, and whose
  calls' ports are all static: one graph per iteration of the whole body.
* scope ``call``: otherwise every call inside a loop whose ports are all static, one graph each.
* never: a call or loop inside an ``eager`` loop (eager opts out of static shapes), calls outside
  loops (they run once per request: capture would not pay for itself), or anything when the
  placement lists no capture buckets.

Shape buckets: a port with a dim over options that have a fixed set of values
(`f32[option.frames, 16]`) is static once the request's values are known, so a unit whose ports
are static but for such dims gets one entry per combination of those options' values
(`CaptureSpec.shape`), its ports at that bucket's sizes. The door refuses a request whose values
are not listed, so every request runs in a captured bucket.

Bounded dims (`i64[<=k + 1]`, a step that emits 1 to k + 1 tokens): a value holds at most the
bound, so the unit is planned at the bound, ONE entry whatever the length (not an entry per
length: a length is chosen inside the step, not known before it runs); ``padded`` names the
ports sized so, whose values the runtime must pad to the bound and cut back to their length.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TypeGuard

from wgc.ir.model import Model
from wgc.ir.types import Dim, DimKind
from wgc.lower.pieces import LoweredWalk
from wgc_runtime.contract.kinds import CaptureScope
from wgc_runtime.contract.spec import CallSpec, CaptureSpec, TypeSpec

Ports = list[tuple[str, TypeSpec | None]]
Shape = tuple[tuple[str, object], ...]


def bucket_dims(model: Model) -> dict[str, Dim]:
    """Every shape-bucket dim of the model's ports, by its text (the `TypeSpec` dim name)."""
    out: dict[str, Dim] = {}
    for n in model.nodes:
        for p in (*n.inputs, *n.outputs):
            for d in p.type.dims if p.type is not None else ():
                if d.kind is DimKind.BUCKET and d.name:
                    out.setdefault(d.name, d)
    return out


def largest_nbytes(t: TypeSpec | None, shapes: dict[str, Dim]) -> int | None:
    """Bytes of one value of type ``t``: exact when static, the largest bucket's when its
    dynamic dims are all shape buckets, else None."""
    if t is None:
        return None
    if t.is_static:
        return t.nbytes
    best = None
    for _, sized in _per_bucket([("", t)], shapes):
        n = sized[0][1].nbytes if sized[0][1] is not None else None
        if n is not None and (best is None or n > best):
            best = n
    return best


def _ports(call: CallSpec) -> Ports:
    return [(f"{call.id}#{p.port}", p.type) for p in call.inputs] + [
        (f"{call.id}#{p.port}", p.type) for p in call.outputs
    ]


def _static(ports: Ports) -> bool:
    return all(t is not None and t.is_static for _, t in ports)


def _per_bucket(ports: Ports, shapes: dict[str, Dim]) -> Iterator[tuple[Shape, Ports]]:
    """``ports`` once per shape bucket they depend on (once, with no shape, if none), at that
    bucket's sizes; nothing when a dim is dynamic."""
    names = {d for _, t in ports if t is not None for d in t.dims if _named(d)}
    if any(t is None for _, t in ports) or not names <= shapes.keys():
        return
    values: dict[str, list] = {}
    for n in sorted(names):
        for assign, _ in shapes[n].cases:
            for option, v in assign:
                if v not in values.setdefault(option, []):
                    values[option].append(v)
    options = sorted(values)
    for combo in itertools.product(*(values[o] for o in options)):
        chosen = dict(zip(options, combo, strict=True))
        sized = [(name, _sized(t, shapes, chosen)) for name, t in ports]
        if _static(sized):
            yield tuple(chosen.items()), sized


def _named(d: int | str) -> TypeGuard[str]:
    """A shape bucket's dim (by its text): a str dim that is not bounded (`<=N`)."""
    return isinstance(d, str) and not _bound(d)


def _bound(d: int | str) -> int | None:
    """N of a bounded dim ``"<=N"`` (what `wgc.lower.typespec` writes), else None."""
    return int(d[2:]) if isinstance(d, str) and d.startswith("<=") and d[2:].isdigit() else None


def _padded(ports: Ports) -> tuple[str, ...]:
    """The ports with a bounded dim: planned at its bound."""
    return tuple(name for name, t in ports if t is not None and any(_bound(d) for d in t.dims))


def _sized(t: TypeSpec | None, shapes: dict[str, Dim], values: dict) -> TypeSpec | None:
    if t is None:
        return None
    dims: list[int | str] = []
    for d in t.dims:
        bound = _bound(d)
        size = bound if bound is not None else shapes[d].size_for(values) if _named(d) else d
        dims.append(d if size is None else size)
    return TypeSpec(t.dtype, tuple(dims))


def captures(
    walk: LoweredWalk, buckets: tuple[int, ...], shapes: dict[str, Dim] | None = None
) -> list[CaptureSpec]:
    if not buckets:
        return []
    shapes = shapes or {}
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
        sized = list(_per_bucket(ports, shapes)) if calls else []
        if not sized:
            continue
        covered.update(c.id for c in calls)
        for shape, typed in sized:
            out.append(
                CaptureSpec(
                    walk=w.name,
                    rank=ranks[0],
                    scope=CaptureScope.LOOP,
                    loop=lp.name,
                    calls=tuple(c.id for c in calls),
                    nodes=tuple(dict.fromkeys(c.node for c in calls)),
                    ports=_typed(typed),
                    buckets=buckets,
                    shape=shape,
                    padded=_padded(ports),
                )
            )
    for cid, c in sorted(walk.calls.items()):
        if cid in covered or not c.loops or eager & set(c.loops):
            continue
        for shape, typed in _per_bucket(_ports(c), shapes):
            out.append(
                CaptureSpec(
                    walk=w.name,
                    rank=c.rank,
                    scope=CaptureScope.CALL,
                    calls=(cid,),
                    nodes=(c.node,),
                    ports=_typed(typed),
                    buckets=buckets,
                    shape=shape,
                    padded=_padded(_ports(c)),
                )
            )
    return out


def _typed(ports: Ports) -> tuple[tuple[str, TypeSpec], ...]:
    return tuple((name, t) for name, t in ports if t is not None)


def _chain(walk: LoweredWalk, loop: str) -> list[str]:
    """``loop`` and its enclosing loops."""
    out = []
    cur: str | None = loop
    while cur is not None and cur not in out:
        out.append(cur)
        cur = walk.parents.get(cur)
    return out
