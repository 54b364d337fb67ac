"""Values in, and readiness: when a call instance (or a sink unit) can run (`Values`).

Values are kept per (unit, port) and keyed by the *iteration vector* of the consumer's loops that
the value's tag names (`messages.Value`): a value bound once per walk instance is keyed ``()``,
one bound in iteration (a, b) of loops (A, B) is keyed ``(a, b)``. A unit instance (unit,
iterations) runs when every input has a value under its key: ``once`` / ``per_iteration``
inputs by the longest matching prefix of the instance's iterations, ``carried`` inputs from the
loop-init value at iteration 0 of their loop and from the previous iteration's value after,
``stream`` inputs when the stream buffer (owned here) has a chunk ready (a consumer that took
a chunk before and finds the next one not ready, every other input there, is an *underrun*,
counted once per chunk in `NodeStats`). In a speculative iteration only stateless calls without
stream inputs may run.

**Sink units** (a piece's `SinkSpec`s: an `emit` / `persist` in a loop of a value from outside
the loop's iteration) run like calls without a node: an instance per iteration, ready when its
one input is, counted in its loop's iteration; they run here, at once, when ready.

`Values` owns the rank's readiness work lists: the units whose inputs changed since it last
looked (``dirty``) and the ready call instances queued per (walk, call) (``ready``), taken in
round robin by the executor's step.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import Edge, Engine, FailKind, InputMode
from wgc_runtime.contract.spec import PortIn, Unit
from wgc_runtime.core.executor.state import (
    MISSING,
    Inst,
    RequestAbort,
    RequestState,
    WalkRun,
    lookup,
    unconfirmed,
)
from wgc_runtime.core.executor.stats import NodeStats

if TYPE_CHECKING:
    from wgc_runtime.core.executor.routing import Router
    from wgc_runtime.core.executor.streams import Streams

Fail = Callable[[str | None, RequestAbort], None]


def tag_key(call: Unit, iters: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
    """A value's key for ``call``: the iterations its tag names of the call's loops, outer
    first, up to the first loop it does not name."""
    tag = dict(iters)
    key: list[int] = []
    for lp in call.loops:
        if lp not in tag:
            break
        key.append(tag[lp])
    return tuple(key)


class Values:
    """Values kept per walk run, and which unit instances are ready (see the module
    docstring)."""

    streams: Streams
    router: Router
    fail: Fail

    def __init__(self, rank: int, engines: dict[str, Engine], stats: NodeStats) -> None:
        self.rank = rank
        self.engines = engines
        self.stats = stats
        self.dirty: dict[tuple[int, int], WalkRun] = {}  # (id(walk run), unit) -> walk run
        self.ready: OrderedDict[tuple[str, int], deque[Inst]] = OrderedDict()

    def connect(self, streams: Streams, router: Router, fail: Fail) -> None:
        """The parts it calls: stream buffers (stream inputs), the router (sink units run
        here), and the request's failure."""
        self.streams, self.router, self.fail = streams, router, fail

    def add_inst(self, w: WalkRun, call: Unit, it: tuple[int, ...]) -> None:
        """A new call (or sink unit) instance of ``w`` waits for its inputs."""
        w.waiting.setdefault(call.id, {})[it] = Inst(w, call, it)
        self.dirty[(id(w), call.id)] = w

    def mark(self, w: WalkRun, cid: int) -> None:
        """Unit ``cid`` of ``w`` may have become ready: look at it on the next step."""
        self.dirty[(id(w), cid)] = w

    def store(
        self,
        w: WalkRun,
        cid: int,
        port_name: str,
        edge: Edge,
        loop_name: str | None,
        iters: tuple[tuple[str, int], ...],
        value: Any,
    ) -> None:
        """Keep a value for call ``cid``'s port of walk run ``w`` (a `Value`'s fields; a call on
        this rank sends to another call of the same walk run here without the message)."""
        call = w.piece.units.get(cid)
        if call is None:
            raise RequestAbort(
                FailKind.INTERNAL,
                f"rank {self.rank}: walk `{w.walk}` has no call {cid} here "
                f"(value for `{port_name}`)",
                w.walk,
            )
        slot = (cid, port_name)
        key = tag_key(call, iters)
        port = w.piece.ports.get(slot)
        loop = port.loop if port is not None else None
        if edge == Edge.LOOP_CARRIED:
            w.carried.setdefault(slot, {})[key] = value
            w.carried_loop[slot] = loop or loop_name or ""
        elif edge == Edge.TERMINAL and port is not None and _inner_yield(call, port, key):
            # an inner loop's `yield last` that rebinds the enclosing loop's carried channel,
            # sent when the inner loop ends in iteration i of the carrying loop: iteration
            # i + 1's value (a value for an iteration that never starts is never read)
            j = call.loops.index(port.loop or "")
            w.carried.setdefault(slot, {})[(*key[:j], key[j] + 1)] = value
            w.carried_loop[slot] = port.loop or ""
        elif edge == Edge.LOOP_INIT or (port is not None and port.mode is InputMode.CARRIED):
            # iteration 0's value of a carried port (an earlier loop's yield comes as
            # `terminal`, once that loop has ended)
            w.inits.setdefault(slot, {})[key] = value
            if loop or edge == Edge.LOOP_INIT:
                w.carried_loop[slot] = loop or loop_name or ""
        else:
            w.values.setdefault(slot, {})[key] = value
        self.dirty[(id(w), cid)] = w

    def input(self, w: WalkRun, inst: Inst, port: PortIn) -> Any:
        """The instance's value of a non-stream input port, or `MISSING`."""
        slot = (inst.call.id, port.port)
        if port.mode is InputMode.CARRIED:
            loop = port.loop or w.carried_loop.get(slot)
            if loop is None or loop not in inst.call.loops:
                return MISSING
            j = inst.call.loops.index(loop)
            if inst.it[j] == 0:
                return lookup(w.inits.get(slot), inst.it[:j])
            return w.carried.get(slot, {}).get(inst.it[: j + 1], MISSING)
        return lookup(w.values.get(slot), inst.it)

    def ready_now(self, inst: Inst) -> dict[str, Any] | None:
        """The instance's non-stream input values when it can run now (its stream inputs have
        a chunk ready), else None."""
        w = inst.walk
        if not w.started:
            return None
        has_stream = False
        starved = None  # a stream with no chunk ready: an underrun if every other input is here
        inputs: dict[str, Any] = {}
        for p in inst.call.inputs:
            if p.mode is InputMode.STREAM:
                has_stream = True
                buf = self.streams.inlet(w.req, p.src.name or "").buf
                if buf.ended:
                    raise RequestAbort(
                        FailKind.STREAM,
                        f"`{inst.call.node}` in walk `{w.walk}` needs a chunk of stream "
                        f"`{p.src.name}`, which already delivered its final chunk",
                        w.walk,
                        inst.call.node,
                    )
                if not buf.ready():
                    starved = (p.src.name or "", buf)
                    continue
            else:
                v = self.input(w, inst, p)
                if v is MISSING:
                    return None
                inputs[p.port] = v
        # in a speculative iteration only stateless calls without stream inputs may run
        speculative = bool(inst.call.loops) and unconfirmed(w, inst.call.loops, inst.it)
        stateful = (
            has_stream or self.engines.get(inst.call.node, Engine.STATELESS) is not Engine.STATELESS
        )
        if speculative and stateful:
            return None
        if starved is not None:
            name, buf = starved
            if buf.taken > 0 and buf.starved_at != buf.taken:  # once per chunk, after the first
                buf.starved_at = buf.taken
                self.stats.underrun(name)
            return None
        inst.inputs = None if has_stream else inputs
        return inputs

    def process_dirty(self) -> bool:
        """Queue the ready call instances; run ready sink units at once. True when a sink
        unit ran (work happened that sent nothing yet)."""
        ran = False
        dirty, ready = self.dirty, self.ready
        while dirty:
            (_, cid), w = dirty.popitem()
            insts = w.waiting.get(cid)
            if not insts:
                continue
            for it in sorted(insts):
                inst = insts.get(it)
                if inst is None or inst.queued or inst.dead:
                    continue
                try:
                    ready_now = self.ready_now(inst) is not None
                    if ready_now and cid in w.piece.sinks:
                        ran = True
                        self.router.run_sink(inst, w.piece.sinks[cid])
                        continue
                except RequestAbort as exc:
                    self.fail(w.req.id, exc)
                    break
                if ready_now:
                    inst.queued = True
                    ready.setdefault((w.walk, cid), deque()).append(inst)
        return ran

    def mark_stream(self, req: RequestState, stream: str) -> None:
        """The stream's buffer changed: its consumer calls here may have become ready."""
        for w in req.walks.values():
            for cid in w.piece.consumers.get(stream, ()):
                if w.waiting.get(cid):
                    self.dirty[(id(w), cid)] = w


def _inner_yield(call: Unit, port: PortIn, key: tuple[int, ...]) -> bool:
    """Whether a terminal value for carried ``port`` comes from inside its own loop (a nested
    loop's yield, tagged with the carrying loop's iteration) rather than from an earlier loop
    ended before it (iteration 0's value)."""
    if port.mode is not InputMode.CARRIED or port.loop not in call.loops:
        return False
    return call.loops.index(port.loop) < len(key)


def consume(w: WalkRun, inst: Inst) -> None:
    """Drop the per-iteration values only this instance reads."""
    if not inst.it:
        return
    for p in inst.call.inputs:
        slot = (inst.call.id, p.port)
        for store in (w.values.get(slot), w.carried.get(slot)):
            if store is not None:
                store.pop(inst.it, None)
