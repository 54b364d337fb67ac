"""The compiler does the indexing: a rank's piece of a walk with every lookup the executor needs.

Given one rank's calls, sink units and loop copies of a walk, `piece` fills in what the executor
would otherwise derive at run time:

* each loop's ``chain`` (its enclosing loops on this rank, outermost first, itself last), its
  ``body`` (the units directly in it: calls, then sink units, by id) and ``nested`` loops, the
  streams its body pushes to (``pushes``) and its ``order``: the smallest unit id inside it,
  which places it among the units of its scope in statement order (0 when it holds none);
* the piece's top level ``body`` and ``nested`` loops;
* ``producers`` (stream -> the calls that push to it) and ``consumers`` (stream -> the calls
  that take its chunks).

A call's ``pushes`` (the streams its outputs go to) is set when the call is lowered.
"""

from __future__ import annotations

import dataclasses

from wgc_runtime.contract.kinds import InputMode
from wgc_runtime.contract.spec import CallSpec, LoopSpec, PieceSpec, SinkSpec, Unit


def piece(
    walk: str,
    rank: int,
    calls: tuple[CallSpec, ...],
    sinks: tuple[SinkSpec, ...],
    loops: tuple[LoopSpec, ...],
    inputs: tuple[str, ...],
    source: str,
) -> PieceSpec:
    units: tuple[Unit, ...] = (*calls, *sinks)
    by_name = {lp.name: lp for lp in loops}
    body: dict[str | None, list[int]] = {}
    for u in units:
        body.setdefault(u.loops[-1] if u.loops else None, []).append(u.id)
    nested: dict[str | None, list[str]] = {}
    for lp in loops:
        nested.setdefault(lp.parent if lp.parent in by_name else None, []).append(lp.name)
    pushes: dict[str, list[str]] = {}
    order: dict[str, int] = {}
    for u in units:
        for name in u.loops:
            into = pushes.setdefault(name, [])
            into.extend(s for s in u.pushes if s not in into)
            order[name] = min(order.get(name, u.id), u.id)
    indexed = tuple(
        dataclasses.replace(
            lp,
            chain=_chain(lp.name, by_name),
            body=tuple(body.get(lp.name, ())),
            nested=tuple(nested.get(lp.name, ())),
            pushes=tuple(pushes.get(lp.name, ())),
            order=order.get(lp.name, 0),
        )
        for lp in loops
    )
    return PieceSpec(
        walk=walk,
        rank=rank,
        inputs=inputs,
        loops=indexed,
        calls=calls,
        sinks=sinks,
        body=tuple(body.get(None, ())),
        nested=tuple(nested.get(None, ())),
        producers=_by_stream((s, c.id) for c in calls for s in c.pushes),
        consumers=_by_stream(
            (p.src.name, c.id)
            for c in calls
            for p in c.inputs
            if p.mode is InputMode.STREAM and p.src.name
        ),
        source=source,
    )


def _chain(name: str, loops: dict[str, LoopSpec]) -> tuple[str, ...]:
    out: list[str] = []
    cur: str | None = name
    while cur is not None and cur in loops and cur not in out:
        out.append(cur)
        cur = loops[cur].parent
    return tuple(reversed(out))


def _by_stream(pairs) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out: dict[str, list[int]] = {}
    for stream, call in pairs:
        ids = out.setdefault(stream, [])
        if call not in ids:
            ids.append(call)
    return tuple((s, tuple(ids)) for s, ids in out.items())
