"""The control messages a walk needs, per rank: who gets `StartWalk`, who reports `WalkDone`, who
needs `Release` (issue 9: one message per data hop is the floor).

A rank's piece of a walk is *plain* when it only runs stateless calls once each: no loops, no
sink units, no streams, no persist, no node state; its calls' values go to other calls or to the
client. For a plain piece:

* **start** (``needs_start``): it starts on the first value that carries the walk's *header* (its
  flow and the request's options, `Value.options`). Every sender marks such a destination
  (`Dest.starts`) and attaches the header to the first value it sends there per walk instance,
  so whichever value arrives first starts the piece. A plain piece that receives no value from
  the conductor or another rank (its inputs all come from its own calls) still gets `StartWalk`.
* **completion** (``reports_done``; also for a piece that is plain but for calls taking one
  stream chunk each, like a vocoder's walk per window): a call is *evidenced* when the
  conductor learns that it ran without the rank saying so: a call on a reporting rank, a call
  whose value is emitted (when the conductor counts the walk's emits, `WalkSpec.done_emits`),
  or a call whose value goes to an evidenced call outside any loop (that call ran, so its input
  arrived). A piece whose calls are all evidenced does not send `WalkDone`. The conductor
  counts emits only when every emit of the walk comes from such a piece (a fixed number per
  walk instance) and no walk input is emitted (a persisted input is emitted by the rank that
  keeps it, a dynamic choice).
* **release** (``needs_release``): a plain piece leaves nothing behind: the rank drops the
  request's bookkeeping itself when the piece is done, and gets no `Release` when the request
  ends normally (a failed or cancelled request releases every rank).

Every other piece keeps `StartWalk`, `WalkDone` and `Release` as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from wgc_runtime.contract.conductor import WalkInputSpec
from wgc_runtime.contract.kinds import DestKind, InputMode, SourceKind
from wgc_runtime.contract.spec import CallSpec, Dest, PieceSpec

_PLAIN_DESTS = (DestKind.CALL, DestKind.CLIENT)


@dataclass(frozen=True, slots=True)
class Control:
    """One walk's control plan: the pieces and inputs with `Dest.starts` marked, and the
    conductor's lists (`WalkSpec.report`, ``lazy``, ``no_release``, ``done_emits``)."""

    pieces: dict[int, PieceSpec]
    inputs: tuple[WalkInputSpec, ...]
    report: tuple[int, ...]
    lazy: tuple[int, ...]
    no_release: tuple[int, ...]
    done_emits: int


def plain(piece: PieceSpec, stateless: frozenset[str], chunks: bool = False) -> bool:
    """Whether ``piece`` only runs stateless calls once each (see the module docstring);
    ``chunks``: its calls may take stream chunks too (the buffers are the owner rank's state)."""
    if piece.loops or piece.sinks or piece.producers or not piece.calls:
        return False
    if piece.consumers and not chunks:
        return False
    modes = (InputMode.ONCE, InputMode.STREAM) if chunks else (InputMode.ONCE,)
    for c in piece.calls:
        if c.node not in stateless or c.loops or c.pushes:
            return False
        if any(p.mode not in modes for p in c.inputs):
            return False
        if any(d.kind not in _PLAIN_DESTS for o in c.outputs for d in o.dests):
            return False
    return True


def _fed(piece: PieceSpec, rank_of: Mapping[int, int]) -> bool:
    """Whether some value reaches ``piece`` from the conductor or another rank."""
    for c in piece.calls:
        for p in c.inputs:
            if p.src.kind is SourceKind.INPUT:
                return True
            if p.src.kind is SourceKind.CALL and rank_of.get(p.src.call or -1) != piece.rank:
                return True
    return False


def _mark(d: Dest, lazy: frozenset[int], sender: int | None) -> Dest:
    if d.kind is DestKind.CALL and d.rank in lazy and d.rank != sender:
        return dataclasses.replace(d, starts=True)
    return d


def _mark_call(c: CallSpec, lazy: frozenset[int]) -> CallSpec:
    outputs = tuple(
        dataclasses.replace(o, dests=tuple(_mark(d, lazy, c.rank) for d in o.dests))
        for o in c.outputs
    )
    return dataclasses.replace(c, outputs=outputs)


def walk_control(
    pieces: Mapping[int, PieceSpec],
    inputs: tuple[WalkInputSpec, ...],
    stateless: frozenset[str],
) -> Control:
    """The control plan of one walk whose rank ``r`` runs ``pieces[r]``."""
    ranks = sorted(pieces)
    plains = {r for r in ranks if plain(pieces[r], stateless)}
    # pieces that may skip `WalkDone`: plain ones, and plain but for taking stream chunks
    once = {r for r in ranks if plain(pieces[r], stateless, chunks=True)}
    calls = {c.id: c for r in ranks for c in pieces[r].calls}
    rank_of = {c.id: c.rank for c in calls.values()}
    emits = [
        c.id
        for r in ranks
        for c in pieces[r].calls
        for o in c.outputs
        for d in o.dests
        if d.kind is DestKind.CLIENT
    ]
    sink_emits = any(u.dest.kind is DestKind.CLIENT for r in ranks for u in pieces[r].sinks)
    input_emits = any(d.kind is DestKind.CLIENT for i in inputs for d in i.dests)
    count_emits = (
        bool(emits)
        and not sink_emits
        and not input_emits
        and all(rank_of[c] in once for c in emits)
    )
    evidenced = {cid for cid, r in rank_of.items() if r not in once}
    # an emit the conductor does not count must be followed by its rank's `WalkDone`
    unproven = set() if count_emits else set(emits)
    if count_emits:
        evidenced |= set(emits)
    # a call whose value feeds an evidenced top-level call ran too: a worklist over who feeds
    # whom (a pass over every call until none is added was quadratic along a chain of calls)
    feeders: dict[int, list[int]] = {}
    for cid, c in calls.items():
        for t in {d.call for o in c.outputs for d in o.dests if d.kind is DestKind.CALL}:
            if t in calls and not calls[t].loops:
                feeders.setdefault(t, []).append(cid)
    work = list(evidenced)
    while work:
        for cid in feeders.get(work.pop(), ()):
            if cid not in evidenced and cid not in unproven:
                evidenced.add(cid)
                work.append(cid)
    quiet = {r for r in once if all(c.id in evidenced for c in pieces[r].calls)}
    lazy = frozenset(r for r in plains if _fed(pieces[r], rank_of))
    out: dict[int, PieceSpec] = {}
    for r in ranks:
        p = pieces[r]
        out[r] = dataclasses.replace(
            p,
            calls=tuple(_mark_call(c, lazy) for c in p.calls),
            needs_start=r not in lazy,
            reports_done=r not in quiet,
            needs_release=r not in plains,
        )
    marked = tuple(
        dataclasses.replace(i, dests=tuple(_mark(d, lazy, None) for d in i.dests)) for i in inputs
    )
    return Control(
        pieces=out,
        inputs=marked,
        report=tuple(r for r in ranks if r not in quiet),
        lazy=tuple(sorted(lazy)),
        no_release=tuple(sorted(plains)),
        done_emits=len(emits) if count_emits and quiet & {rank_of[c] for c in emits} else 0,
    )
