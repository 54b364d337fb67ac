"""Values in, and readiness: when a call instance (or a sink unit) can run.

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
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import DestKind, Edge, Engine, FailKind, InputMode
from wgc_runtime.contract.messages import (
    CONDUCTOR,
    ClientOut,
    ForwardPersisted,
    Value,
    WalkDone,
)
from wgc_runtime.contract.spec import Dest, Unit
from wgc_runtime.core.executor.state import (
    MISSING,
    Inst,
    RequestAbort,
    RequestState,
    WalkRun,
)

if TYPE_CHECKING:
    from wgc_runtime.core.executor.core import RankExecutor


def _key(call: Unit, iters: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
    tag = dict(iters)
    key = []
    for lp in call.loops:
        if lp not in tag:
            break
        key.append(tag[lp])
    return tuple(key)


def _on_value(self: RankExecutor, m: Value) -> None:
    w = self._walk(m.request, m.walk_id, m.walk)
    if w is None:
        return
    if m.options is not None and not w.started and not w.piece.spec.needs_start:
        self._begin(w, m.flow, m.options)  # the walk's header: this piece starts on it
    self._store(w, m.call, m.port, m.edge, m.loop, m.iters, None if m.signal else m.data)


def _store(
    self: RankExecutor,
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
            f"rank {self.rank}: walk `{w.walk}` has no call {cid} here (value for `{port_name}`)",
            w.walk,
        )
    slot = (cid, port_name)
    key = self._key(call, iters)
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
    self._dirty[(id(w), cid)] = w


def _inner_yield(call: Unit, port, key: tuple[int, ...]) -> bool:
    """Whether a terminal value for carried ``port`` comes from inside its own loop (a nested
    loop's yield, tagged with the carrying loop's iteration) rather than from an earlier loop
    ended before it (iteration 0's value)."""
    if port.mode is not InputMode.CARRIED or port.loop not in call.loops:
        return False
    return call.loops.index(port.loop) < len(key)


def _on_forward(self: RankExecutor, m: ForwardPersisted) -> None:
    req = self._req(m.request)
    if (m.flow, m.name) not in req.persisted:
        raise RequestAbort(
            FailKind.FLOW,
            f"flow `{m.flow}` passes `{m.name}`, which no walk persisted yet",
            m.walk,
        )
    value = req.persisted[(m.flow, m.name)]
    for d in m.dests:
        if d.kind is DestKind.CALL:
            self._send_value(req.id, m.walk_id, m.walk, d, (), value)
        elif d.kind is DestKind.CLIENT:
            channel = d.channel or m.input
            out = ClientOut(req.id, m.walk_id, m.walk, m.flow, d.name or "", channel, (), value)
            self.outbox(CONDUCTOR, out)
        elif d.kind is DestKind.PERSIST:
            req.persisted[(m.flow, d.name or m.input)] = value
    if m.ack:  # no piece of the walk here: say this part of it is done
        self.outbox(CONDUCTOR, WalkDone(req.id, m.walk_id, m.walk, self.rank))


def _send_value(
    self: RankExecutor, request, walk_id, walk, d: Dest, iters, value, w: WalkRun | None = None
) -> None:
    """Send a value to ``d``; the first one per walk run ``w`` to a rank whose piece starts on
    its first value (`Dest.starts`) carries the walk's header."""
    local = d.rank == self.rank or d.rank is None
    if local and w is not None and self._live(w, request, walk_id):
        # a call of the same walk run here: kept at once (what `_on_value` does with a
        # `Value`; the piece has started, so no header is needed)
        call = d.call if d.call is not None else -1
        self._store(w, call, d.port or "", d.edge, d.loop, iters, value)
        return
    header = d.starts and w is not None and d.rank not in w.headed
    if header:
        assert w is not None and d.rank is not None
        w.headed.add(d.rank)
    msg = Value(
        request,
        walk_id,
        walk,
        d.call if d.call is not None else -1,
        d.port or "",
        d.edge,
        d.loop,
        iters,
        value is None,
        value,
        w.flow if header and w is not None else "",
        tuple(w.options.items()) if header and w is not None else None,
    )
    if d.rank is None or d.rank == self.rank:
        self._on_value(msg)
    else:
        self.outbox(d.rank, msg)


def _live(self: RankExecutor, w: WalkRun, request: str, walk_id: int) -> bool:
    """Whether ``w`` is the running walk run ``walk_id`` of ``request`` here (what `_walk`
    would find for them)."""
    return self.requests.get(request) is w.req and w.req.walks.get(walk_id) is w


def _lookup(store: dict[tuple[int, ...], Any] | None, key: tuple[int, ...]) -> Any:
    if not store:
        return MISSING
    for k in range(len(key), -1, -1):
        v = store.get(key[:k], MISSING)
        if v is not MISSING:
            return v
    return MISSING


def _input(self: RankExecutor, w: WalkRun, inst: Inst, port) -> Any:
    slot = (inst.call.id, port.port)
    if port.mode is InputMode.CARRIED:
        loop = port.loop or w.carried_loop.get(slot)
        if loop is None or loop not in inst.call.loops:
            return MISSING
        j = inst.call.loops.index(loop)
        if inst.it[j] == 0:
            return self._lookup(w.inits.get(slot), inst.it[:j])
        return w.carried.get(slot, {}).get(inst.it[: j + 1], MISSING)
    return self._lookup(w.values.get(slot), inst.it)


def _confirmed(self: RankExecutor, w: WalkRun, loops: tuple[str, ...], it: tuple[int, ...]):
    """The outermost unconfirmed (loop run, iteration) of a chain, or None."""
    for k, name in enumerate(loops):
        lr = w.loops.get((name, it[:k]))
        if lr is not None and not lr.confirmed(it[k]):
            return lr, it[k]
    return None


def _ready_now(self: RankExecutor, inst: Inst) -> dict[str, Any] | None:
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
            buf = self._buffer(w.req, p.src.name or "")
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
            v = self._input(w, inst, p)
            if v is MISSING:
                return None
            inputs[p.port] = v
    # in a speculative iteration only stateless calls without stream inputs may run
    speculative = bool(inst.call.loops) and self._confirmed(w, inst.call.loops, inst.it)
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


def _process_dirty(self: RankExecutor) -> bool:
    """Queue the ready call instances; run ready sink units at once. True when a sink
    unit ran (work happened that sent nothing yet)."""
    ran = False
    while self._dirty:
        (_, cid), w = self._dirty.popitem()
        insts = w.waiting.get(cid)
        if not insts:
            continue
        for it in sorted(insts):
            inst = insts.get(it)
            if inst is None or inst.queued or inst.dead:
                continue
            try:
                ready = self._ready_now(inst) is not None
                if ready and cid in w.piece.sinks:
                    ran = True
                    self._run_sink(inst, w.piece.sinks[cid])
                    continue
            except RequestAbort as exc:
                self._fail(w.req.id, exc)
                break
            if ready:
                inst.queued = True
                self._ready.setdefault((w.walk, cid), deque()).append(inst)
    return ran


def _run_sink(self: RankExecutor, inst: Inst, dest: Dest) -> None:
    """A sink unit's instance: send its value to ``dest`` (held while speculative)."""
    w, call = inst.walk, inst.call
    port = call.inputs[0]
    cached = inst.inputs
    inst.inputs = None
    value = cached[port.port] if cached is not None else self._input(w, inst, port)
    w.waiting.get(call.id, {}).pop(inst.it, None)
    self._consume(w, inst)

    def fire() -> None:
        self._sink(w, dest, value, port.channel, inst.it)
        self._unit_done(w, call.loops, inst.it)

    self._route_or_hold(w, call.loops, inst.it, fire)


def _mark_stream_dirty(self: RankExecutor, req: RequestState, stream: str) -> None:
    for w in req.walks.values():
        for cid in w.piece.consumers.get(stream, ()):
            if w.waiting.get(cid):
                self._dirty[(id(w), cid)] = w


def _consume(w: WalkRun, inst: Inst) -> None:
    """Drop the per-iteration values only this instance reads."""
    if not inst.it:
        return
    for p in inst.call.inputs:
        slot = (inst.call.id, p.port)
        for store in (w.values.get(slot), w.carried.get(slot)):
            if store is not None:
                store.pop(inst.it, None)
