"""Loops, `until` and speculation (`Loops`).

Each loop instance (loop, iterations of its enclosing loops) runs iteration i+1 once this rank's
part of iteration i is complete (its units ran and routed, its nested loops ended), up to
``max``. With ``until``, iteration i+1 starts when stop_i is known false; if the loop
``speculate``s it may start while stop_i is unknown (at most one such step: iteration i is then
confirmed, so only stop_i is unknown). Every effect of a speculative iteration (values sent,
emits, persists, stream items, stop values) is held; it is released when stop_i turns out false
and discarded when it is true, so a speculative step is never visible. `nospeculate` loops
wait. The loop ends after the iteration whose stop is true (or the last of ``max``), on every
rank of the loop (the producer of ``stop`` sends `Until` to each). Then terminal values (the last
iteration's) and accumulated ones (every iteration's, stacked on a new dim 0) travel on.
Discarding a speculative iteration i drops only what is inside that loop (a sibling loop's
iteration i has the same iteration prefix and is left alone).

`Loops` keeps no table of its own: a walk run's loop runs live in it (`WalkRun.loops`,
`LoopRun`), and it drives them: starts iterations (their instances go to `Values`), counts units
done, holds and releases speculative effects, and at a loop's end sends its yields on
(`Router`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from wgc_runtime.contract.kinds import DestKind, Edge, FailKind
from wgc_runtime.contract.spec import Unit
from wgc_runtime.core.executor.state import LoopRun, RequestAbort, WalkRun, unconfirmed

if TYPE_CHECKING:
    from wgc_runtime.core.executor.routing import Router
    from wgc_runtime.core.executor.streams import Streams
    from wgc_runtime.core.executor.values import Values

Action = Callable[[], None]


class Loops:
    """Runs the loop instances of walk runs (see the module docstring)."""

    router: Router
    walk_done: Callable[[WalkRun], None]

    def __init__(self, values: Values, streams: Streams) -> None:
        self.values = values
        self.streams = streams

    def connect(self, router: Router, walk_done: Callable[[WalkRun], None]) -> None:
        """Where an ended loop's values go, and what a walk run's last unit finishes."""
        self.router, self.walk_done = router, walk_done

    def loop_of(self, w: WalkRun, call: Unit, it: tuple[int, ...], loop: str | None) -> LoopRun:
        """The instance of ``loop`` (enclosing ``call``) that iteration ``it`` runs in."""
        if loop not in call.loops:
            raise RequestAbort(
                FailKind.INTERNAL,
                f"walk `{w.walk}`: call {call.id} (`{call.node}`) routes to loop `{loop}`, "
                "which does not enclose it",
                w.walk,
                call.node,
            )
        j = call.loops.index(loop)
        return w.loops[(loop, it[:j])]

    def hold(self, w: WalkRun, loops: tuple[str, ...], it: tuple[int, ...], action: Action) -> None:
        """Run ``action`` (an effect of iteration ``it``) now, or hold it while the iteration
        is speculative."""
        spec = unconfirmed(w, loops, it) if loops else None
        if spec is None:
            action()
            return
        lr, i = spec
        lr.held.setdefault(i, []).append((loops, it, action))

    def start_loop(self, w: WalkRun, name: str, outer: tuple[int, ...]) -> None:
        spec = w.piece.loops[name]
        lr = LoopRun(spec, outer, spec.chain)
        lr.stops.update(w.early_stops.pop((name, outer), {}))
        w.loops[(name, outer)] = lr
        self.start_iteration(w, lr)

    def start_iteration(self, w: WalkRun, lr: LoopRun) -> None:
        i = lr.started
        lr.started += 1
        name = lr.spec.name
        it = (*lr.outer, i)
        p = w.piece
        lr.remaining[i] = len(p.loops[name].body) + len(p.loops[name].nested)
        for cid in p.loops[name].body:
            self.values.add_inst(w, p.units[cid], it)
        for child in p.loops[name].nested:
            self.start_loop(w, child, it)
        for effect in lr.on_start.pop(i, ()):
            self.hold(w, lr.chain, it, effect)
        if lr.remaining[i] == 0:
            self.iteration_complete(w, lr, i)

    def unit_done(self, w: WalkRun, loops: tuple[str, ...], it: tuple[int, ...]) -> None:
        """A unit instance of ``w`` ran and routed its outputs."""
        if w.walk_id not in w.req.walks:
            return
        if not loops:
            w.top_remaining -= 1
            if w.top_remaining == 0:
                self.walk_done(w)
            return
        lr = w.loops.get((loops[-1], it[:-1]))
        if lr is None or lr.ended:
            return
        i = it[-1]
        lr.remaining[i] -= 1
        if lr.remaining[i] == 0:
            self.iteration_complete(w, lr, i)

    def iteration_complete(self, w: WalkRun, lr: LoopRun, i: int) -> None:
        lr.completed = max(lr.completed, i)
        self.advance(w, lr)

    def advance(self, w: WalkRun, lr: LoopRun) -> None:
        if lr.ended:
            return
        i = lr.completed
        if lr.last is not None and i >= lr.last:
            self.end_loop(w, lr)
            return
        if i < 0 or lr.started > i + 1:
            return
        if i + 1 >= lr.spec.max:
            lr.last = i
            self.end_loop(w, lr)
            return
        if lr.spec.until is None or lr.stops.get(i) is False:
            self.start_iteration(w, lr)
            return
        if lr.stops.get(i) is True:
            lr.last = i
            self.end_loop(w, lr)
            return
        # stop_i unknown: at most one speculative step, and only when the loop allows it
        if lr.spec.speculate and lr.confirmed(i):
            self.start_iteration(w, lr)

    def stop(
        self, w: WalkRun, loop: str, outer: tuple[int, ...], iteration: int, stop: bool
    ) -> None:
        """Loop ``loop``'s (instance ``outer``) stop value of ``iteration`` is known (an
        `Until`'s fields; a call here that computes it for this rank only hands it over
        directly)."""
        lr = w.loops.get((loop, outer))
        if lr is None:
            w.early_stops.setdefault((loop, outer), {})[iteration] = stop
            return
        if lr.ended or (lr.last is not None and iteration > lr.last):
            return
        lr.stops[iteration] = stop
        if stop:
            lr.last = iteration
            for j in range(iteration + 1, lr.started):
                self.discard_iteration(w, lr, j)
        else:
            self.release_held(w, lr, iteration + 1)
        self.advance(w, lr)

    def release_held(self, w: WalkRun, lr: LoopRun, i: int) -> None:
        """Iteration i is confirmed: release its held effects, let its stateful calls run."""
        for loops, it, action in lr.held.pop(i, ()):
            self.hold(w, loops, it, action)
        prefix = (*lr.outer, i)
        n = len(prefix)
        for cid, insts in w.waiting.items():
            if w.piece.units[cid].loops[:n] == lr.chain and any(it[:n] == prefix for it in insts):
                self.values.mark(w, cid)

    def discard_iteration(self, w: WalkRun, lr: LoopRun, i: int) -> None:
        """Drop a speculative iteration whose loop already ended: nothing of it is visible."""
        lr.held.pop(i, None)
        lr.on_start.pop(i, None)
        prefix = (*lr.outer, i)
        n = len(prefix)
        # only what is inside this loop: a sibling loop's iteration i has the same prefix
        inside = lr.chain
        for cid, insts in w.waiting.items():
            if w.piece.units[cid].loops[:n] != inside:
                continue
            for it in [it for it in insts if it[:n] == prefix]:
                insts.pop(it).dead = True
        for key in [
            k
            for k in w.loops
            if w.piece.loops[k[0]].chain[:n] == inside and len(k[1]) >= n and k[1][:n] == prefix
        ]:
            del w.loops[key]
        if w.pushing or w.parked:  # its producer instances will never push
            head = (*w.piece.loop_key(lr.spec.name, lr.outer), i)
            for k in [k for k in w.pushing if k[: len(head)] == head]:
                del w.pushing[k]
            w.parked = [x for x in w.parked if x[0][: len(head)] != head]
            self.streams.unpark(w)

    def end_loop(self, w: WalkRun, lr: LoopRun) -> None:
        if lr.ended:
            return
        lr.ended = True
        assert lr.last is not None
        for j in range(lr.last + 1, lr.started):
            self.discard_iteration(w, lr, j)
        lr.on_start.clear()
        tag = tuple(zip(lr.chain[:-1], lr.outer, strict=True))
        for key, dests in lr.yield_dests.items():
            for d in dests.values():
                v: Any
                if d.edge == Edge.TERMINAL:
                    v = lr.yields.get(key)
                else:
                    vals = lr.stacks.get(key, [])
                    if any(x is None for x in vals):
                        raise RequestAbort(
                            FailKind.INTERNAL,
                            f"`yield all` of loop `{lr.spec.name}` has a bare signal",
                            w.walk,
                        )
                    v = torch.stack(vals) if vals else None
                if d.kind is DestKind.CALL:
                    self.router.send_value(w.req.id, w.walk_id, w.walk, d, tag, v, w)
                else:
                    self.router.sink(w, d, v, key[1], lr.outer)
        w.loops.pop((lr.spec.name, lr.outer), None)
        if w.parked:
            self.streams.unpark(w)
        self.unit_done(w, lr.chain[:-1], lr.outer)
