"""The execution core of one rank: runs its pieces of walks for every request, transport-agnostic.

`RankExecutor` takes messages (`deliver`) and runs ready work (`step`, one batch at a time); what
it sends goes through ``outbox(to, msg)`` (``to``: a rank, or `CONDUCTOR`). Messages to itself
are handled in place. It never blocks and never starts a thread: a transport (or `LocalCluster`)
drives it.

**Walk instances.** A `StartWalk` starts this rank's piece of one walk instance. Values are kept
per (call, port) and keyed by the *iteration vector* of the consumer's loops that the value's
tag names (`messages.Value`): a value bound once per walk instance is keyed ``()``, one bound in
iteration (a, b) of loops (A, B) is keyed ``(a, b)``. A call instance (call, iterations) runs
when every input has a value under its key: ``once`` / ``per_iteration`` inputs by the longest
matching prefix of the instance's iterations, ``carried`` inputs from the loop-init value at
iteration 0 of their loop and from the previous iteration's value after, ``stream`` inputs when
the stream buffer (owned here) has a chunk ready. A piece is done when its top-level calls ran
and its top-level loops ended; then `WalkDone` goes to the conductor.

**Loops.** Each loop instance (loop, iterations of its enclosing loops) runs iteration i+1 once
this rank's part of iteration i is complete (its calls ran and routed, its nested loops ended),
up to ``max``. With ``until``, iteration i+1 starts when stop_i is known false; if the loop
``speculate``s it may start while stop_i is unknown (at most one such step: iteration i is
then confirmed, so only stop_i is unknown). In a speculative iteration only *stateless* calls
without stream inputs run, and every effect of their results (values sent, emits, persists,
stream items, stop values) is held; it is released when stop_i turns out false and discarded
when it is true, so a speculative step is never visible. `nospeculate` loops wait. The loop
ends after the iteration whose stop is true (or the last of ``max``), on every rank of the loop
(the producer of ``stop`` sends `Until` to each). Then terminal values (the last iteration's)
and accumulated ones (every iteration's, stacked on a new dim 0) travel on. A loop-carried
destination that is not a call (an `emit` or `persist` of a loop-carried channel, in a
hand-written spec) fires when the next iteration starts, so the last iteration's value is never
delivered. Discarding a speculative iteration i drops only what is inside that loop (a sibling
loop's iteration i has the same iteration prefix and is left alone).

**Sink units.** A piece's `SinkSpec`s (an `emit` / `persist` in a loop of a value from outside
the loop's iteration) run like calls without a node: an instance per iteration, ready when its
one input is, counted in its loop's iteration; it sends its value to the client (`ClientOut`,
named by the channel) or the persisted store, held like any effect while speculative.

**Batching.** Ready call instances of the same (walk, call) run together in one `Node.forward`
call, up to ``max_batch``, at most one per request (a batch never mixes two iterations or two
walk instances of one request). Nodes that keep the default `Node.forward` run item by item
here, so a raising item fails only its request. A custom batched `forward` fails one item by
returning an exception in that item's place; a batched `forward` that raises is retried item by
item when the node is stateless, and fails every request of the batch when it keeps state
(re-running would apply its state changes twice).

**Streams.** Producer values go to the owner rank's `StreamBuffer` (one per request and
stream). The items of one walk instance go in statement order, as the interpreter pushes them:
a producer instance pushes once no earlier producer instance of the stream (by call id, loops'
iterations in turn: `_Piece.order_key`) is waiting, running or still to come in a loop that has
not ended; until then its push is parked. The producing call's remaining destinations wait until
the item is accepted
(back-pressure: a full buffer stalls that call's downstream push, never drops an item). The
owner tells the conductor each time a chunk becomes ready (`ChunkReady`, with its exact
``final`` flag), and takes chunks for consumer calls, for `SkipChunk` and never otherwise.

**Node-state handoffs.** When a kv-cache node runs its walks on several rank groups (the
plan's `WalkSpec.handoffs`), the conductor sends `ExportState` to the group that last ran it
for the request: the node's `export_state` turns the request's state into named tensors, the
state is dropped here, and each tensor travels to the new group as a `StatePart` (a data
message, like `Value`), then `StateEnd` with the count. The receiver imports the state once it
holds every part (`import_state`) and confirms with `StateImported`; the conductor starts the
walk after every confirmation.

**Failures.** A node that raises or returns outputs that do not match its ports fails that
request only (`Failed` to the conductor, with node, walk and message); its state here is dropped
at once. `cancel` / `release` drop a request's state and call every node's ``release``; late
messages for an ended request are dropped.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from wgc_runtime.contract.messages import (
    CONDUCTOR,
    ChunkReady,
    ClientOut,
    ExportState,
    Failed,
    ForwardPersisted,
    Message,
    Release,
    SkipChunk,
    StartWalk,
    StateEnd,
    StateImported,
    StatePart,
    StreamAbandon,
    StreamAck,
    StreamDone,
    StreamItem,
    Until,
    Value,
    WalkDone,
)
from wgc_runtime.contract.node import DTYPES, CallContext, Node, NodeError, Work, check_outputs
from wgc_runtime.contract.spec import (
    CallSpec,
    Dest,
    LoopSpec,
    PieceSpec,
    PortIn,
    RankSpec,
    StreamSpec,
)
from wgc_runtime.core.streams import Policy, StreamBuffer, StreamError, chunk_plan

Outbox = Callable[[int, Message], None]

_MISSING = object()
_ENDED_KEEP = 4096  # ended request ids remembered, to drop their late messages


class RequestAbort(Exception):
    """Raised inside the executor to fail one request."""

    def __init__(self, kind: str, message: str, walk: str | None = None, node: str | None = None):
        super().__init__(message)
        self.kind, self.message, self.walk, self.node = kind, message, walk, node


# ---------------------------------------------------------------------------------- pieces
@dataclass
class _Piece:
    """One piece, indexed once."""

    spec: PieceSpec
    calls: dict[int, CallSpec]
    loops: dict[str, LoopSpec]
    chain: dict[str, tuple[str, ...]]  # loop -> its loops, outermost first, itself last
    direct: dict[str | None, list[int]]  # loop (None: top level) -> calls directly in it
    children: dict[str | None, list[str]]  # loop (None: top level) -> loops directly in it
    stream_calls: dict[str, list[int]]  # stream -> calls taking its chunks
    writes: dict[int, frozenset[str]]  # call -> output ports it binds to channels
    sinks: dict[int, Dest]  # sink unit (a node-less call) -> where its value goes
    ports: dict[tuple[int, str], PortIn]  # (call, port) -> its input spec
    pushes: dict[int, frozenset[str]]  # call -> the streams it pushes to
    producers: dict[str, tuple[int, ...]]  # stream -> the calls pushing to it
    loop_pushes: dict[str, frozenset[str]]  # loop -> the streams its body's calls push to
    rep: dict[str, int]  # loop -> a call id inside it: its place among its scope's units

    def order_key(self, call: CallSpec, it: tuple[int, ...]) -> tuple[int, ...]:
        """Where a call instance runs in the walk's statement order: call ids follow the source
        (a loop's calls lie between the units before and after it), iterations in order."""
        key: list[int] = []
        for lp, i in zip(call.loops, it, strict=True):
            key += (self.rep.get(lp, 0), i)
        return (*key, call.id)

    def loop_key(self, name: str, outer: tuple[int, ...]) -> tuple[int, ...]:
        key: list[int] = []
        for lp, i in zip(self.chain[name], outer, strict=False):
            key += (self.rep.get(lp, 0), i)
        return (*key, self.rep.get(name, 0))

    @staticmethod
    def of(spec: PieceSpec) -> _Piece:
        loops = {lp.name: lp for lp in spec.loops}
        chain: dict[str, tuple[str, ...]] = {}
        for name in loops:
            c, cur = [], name
            while cur is not None:
                c.append(cur)
                cur = loops[cur].parent if cur in loops else None
            chain[name] = tuple(reversed(c))
        direct: dict[str | None, list[int]] = {}
        stream_calls: dict[str, list[int]] = {}
        writes: dict[int, frozenset[str]] = {}
        # a sink unit runs like a call without a node: one input, no output, its `dest` fires
        units = tuple(
            CallSpec(id=u.id, node="", rank=u.rank, loops=u.loops, inputs=(u.input,), writes=())
            for u in getattr(spec, "sinks", ())
        )
        calls = (*spec.calls, *units)
        for c in calls:
            direct.setdefault(c.loops[-1] if c.loops else None, []).append(c.id)
            for p in c.inputs:
                if p.mode == "stream" and p.src.name:
                    stream_calls.setdefault(p.src.name, []).append(c.id)
            if c.writes is not None:  # the ports the source binds
                writes[c.id] = frozenset(c.writes)
            else:  # a hand-written spec: a port is bound when something but its stream reads it
                writes[c.id] = frozenset(
                    o.port for o in c.outputs if any(d.kind != "stream" for d in o.dests)
                )
        children: dict[str | None, list[str]] = {}
        for lp in spec.loops:
            children.setdefault(lp.parent, []).append(lp.name)
        pushes = {
            c.id: frozenset(d.name or "" for o in c.outputs for d in o.dests if d.kind == "stream")
            for c in spec.calls
        }
        producers: dict[str, list[int]] = {}
        loop_pushes: dict[str, set[str]] = {}
        rep: dict[str, int] = {}
        for c in calls:
            for st in pushes.get(c.id, ()):
                producers.setdefault(st, []).append(c.id)
            for lp in c.loops:
                loop_pushes.setdefault(lp, set()).update(pushes.get(c.id, ()))
                rep[lp] = min(rep.get(lp, c.id), c.id)
        return _Piece(
            spec,
            {c.id: c for c in calls},
            loops,
            chain,
            direct,
            children,
            stream_calls,
            writes,
            {u.id: u.dest for u in getattr(spec, "sinks", ())},
            {(c.id, p.port): p for c in calls for p in c.inputs},
            {cid: st for cid, st in pushes.items() if st},
            {st: tuple(ids) for st, ids in producers.items()},
            {lp: frozenset(st) for lp, st in loop_pushes.items()},
            {lp: rep.get(lp, 0) for lp in loops},
        )


# ---------------------------------------------------------------------------------- state
@dataclass(eq=False)
class _Inst:
    """One call instance: a call at one iteration vector of one walk instance."""

    walk: _WalkRun
    call: CallSpec
    it: tuple[int, ...]
    dead: bool = False
    queued: bool = False
    # the input values found when it was queued (a call without stream inputs: they stay
    # ready, values are bound once per key), for `_work`; None: look again (stream chunks can
    # go to another instance meanwhile)
    inputs: dict[str, Any] | None = None


@dataclass(eq=False)
class _LoopRun:
    """One instance of one loop on this rank."""

    spec: LoopSpec
    outer: tuple[int, ...]
    chain: tuple[str, ...]
    started: int = 0  # iterations started
    completed: int = -1  # the last complete iteration (they complete in order)
    last: int | None = None  # the last iteration, once known
    ended: bool = False
    stops: dict[int, bool] = field(default_factory=dict)
    remaining: dict[int, int] = field(default_factory=dict)
    held: dict[int, list] = field(default_factory=dict)  # speculative effects per iteration
    on_start: dict[int, list] = field(default_factory=dict)  # carried emits / persists
    yields: dict[tuple[int, str], Any] = field(default_factory=dict)  # terminal values
    stacks: dict[tuple[int, str], list] = field(default_factory=dict)  # accumulated values
    yield_dests: dict[tuple[int, str], dict[int, Dest]] = field(default_factory=dict)

    def confirmed(self, i: int) -> bool:
        """Iteration i is not speculative here (its parents' iterations aside)."""
        return i == 0 or self.spec.until is None or self.stops.get(i - 1) is False


@dataclass(eq=False)
class _WalkRun:
    req: _Request
    walk_id: int
    walk: str
    piece: _Piece
    flow: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    values: dict[tuple[int, str], dict[tuple[int, ...], Any]] = field(default_factory=dict)
    inits: dict[tuple[int, str], dict[tuple[int, ...], Any]] = field(default_factory=dict)
    carried: dict[tuple[int, str], dict[tuple[int, ...], Any]] = field(default_factory=dict)
    carried_loop: dict[tuple[int, str], str] = field(default_factory=dict)
    loops: dict[tuple[str, tuple[int, ...]], _LoopRun] = field(default_factory=dict)
    early_stops: dict[tuple[str, tuple[int, ...]], dict[int, bool]] = field(default_factory=dict)
    waiting: dict[int, dict[tuple[int, ...], _Inst]] = field(default_factory=dict)
    top_remaining: int = 0
    # stream pushes in statement order: producer instances that ran and have not finished
    # pushing (order key -> streams), and pushes parked behind an earlier one
    pushing: dict[tuple[int, ...], frozenset[str]] = field(default_factory=dict)
    parked: list = field(default_factory=list)


@dataclass(eq=False)
class _Request:
    id: str
    node_state: dict[str, dict] = field(default_factory=dict)
    persisted: dict[tuple[str, str], Any] = field(default_factory=dict)  # (flow, channel)
    walks: dict[int, _WalkRun] = field(default_factory=dict)
    finished_walks: set[int] = field(default_factory=set)
    streams: dict[str, StreamBuffer] = field(default_factory=dict)
    # owner side: items waiting for room, (seq, src rank, item, continuation or None)
    stream_pending: dict[str, deque] = field(default_factory=dict)
    notified: dict[str, int] = field(default_factory=dict)
    acks: dict[int, Callable[[], None]] = field(default_factory=dict)  # producer side
    # node states arriving from another group: (walk id, node, src rank) -> parts, and the
    # part count once `StateEnd` said it
    incoming: dict[tuple[int, str, int], dict[str, Any]] = field(default_factory=dict)
    incoming_parts: dict[tuple[int, str, int], int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------- executor
class RankExecutor:
    """Runs rank ``rank_spec.rank``'s pieces of walks (see the module docstring)."""

    def __init__(
        self,
        rank_spec: RankSpec,
        nodes: Mapping[str, Node],
        outbox: Outbox,
        max_batch: int = 1,
    ) -> None:
        self.spec = rank_spec
        self.rank = rank_spec.rank
        self.nodes = dict(nodes)
        self.outbox = outbox
        self.max_batch = max(1, int(max_batch))
        self.pieces = {p.walk: _Piece.of(p) for p in rank_spec.pieces}
        self.stream_specs: dict[str, StreamSpec] = {s.name: s for s in rank_spec.streams}
        self.engines = {n.name: n.engine for n in rank_spec.nodes}
        self.port_types = self._port_types()
        self.requests: dict[str, _Request] = {}
        self.ended: OrderedDict[str, None] = OrderedDict()
        self._dirty: dict[tuple[int, int], _WalkRun] = {}  # (id(walk run), call) -> walk run
        self._ready: OrderedDict[tuple[str, int], deque[_Inst]] = OrderedDict()
        self._seq = 0
        self._handlers: dict[type, Callable[[Any], None]] = {
            StartWalk: self._on_start,
            Value: self._on_value,
            ForwardPersisted: self._on_forward,
            Until: self._on_until,
            StreamItem: self._on_stream_item,
            StreamAck: self._on_stream_ack,
            StreamDone: self._on_stream_done,
            StreamAbandon: self._on_stream_abandon,
            SkipChunk: self._on_skip_chunk,
            ExportState: self._on_export_state,
            StatePart: self._on_state_part,
            StateEnd: self._on_state_end,
            Release: lambda m: self.release(m.request),
        }

    def _port_types(self) -> dict[str, dict[str, Any]]:
        """Declared output types per node: its `NodeSpec.outputs`, else the node's own context,
        else the ports of every call of it here."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.spec.pieces:
            for c in p.calls:
                for o in c.outputs:
                    out.setdefault(c.node, {})[o.port] = o.type
        for name, node in self.nodes.items():
            declared = getattr(getattr(node, "ctx", None), "outputs", None)
            if declared:
                out[name] = dict(declared)
        for n in self.spec.nodes:
            if n.outputs:
                out[n.name] = dict(n.outputs)
        return out

    # ------------------------------------------------------------------ public API
    def start_walk(
        self,
        request: str,
        walk_id: int,
        walk: str,
        flow: str = "",
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.deliver(StartWalk(request, walk_id, walk, flow, tuple((options or {}).items())))

    def deliver(self, msg: Message) -> None:
        """Take one message (from the conductor, another rank, or this rank)."""
        request = getattr(msg, "request", None)
        if request in self.ended and not isinstance(msg, Release):
            return
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"rank {self.rank} cannot handle {type(msg).__name__}")
        try:
            handler(msg)
        except RequestAbort as exc:
            self._fail(request, exc)

    def step(self) -> bool:
        """Run one batch of ready work; False when nothing was ready."""
        ran = self._process_dirty()
        while self._ready:
            key, insts = next(iter(self._ready.items()))
            del self._ready[key]
            batch = self._take_batch(insts)
            if insts:
                self._ready[key] = insts  # the rest waits for the next step (round robin)
            if batch:
                self._run_batch(batch)
                return True
        return ran

    def has_work(self) -> bool:
        return bool(self._dirty) or any(self._ready.values())

    def cancel(self, request: str) -> None:
        """Stop the request here and drop its state (the conductor cancelled it)."""
        self.release(request)

    def release(self, request: str) -> None:
        """The request ended: drop everything kept for it and release it in every node."""
        req = self.requests.pop(request, None)
        self._mark_ended(request)
        if req is None:
            return
        for w in req.walks.values():
            self._kill_walk(w)
        for node in self.nodes.values():
            with contextlib.suppress(Exception):  # one failing release must not stop the others
                node.release(request)

    def active_requests(self) -> list[str]:
        return list(self.requests)

    # ------------------------------------------------------------------ requests and walks
    def _mark_ended(self, request: str) -> None:
        self.ended[request] = None
        while len(self.ended) > _ENDED_KEEP:
            self.ended.popitem(last=False)

    def _req(self, request: str) -> _Request:
        req = self.requests.get(request)
        if req is None:
            req = self.requests[request] = _Request(request)
        return req

    def _walk(self, request: str, walk_id: int, walk: str) -> _WalkRun | None:
        req = self._req(request)
        if walk_id in req.finished_walks:
            return None  # a late (speculative) value for a finished walk
        w = req.walks.get(walk_id)
        if w is None:
            piece = self.pieces.get(walk)
            if piece is None:
                raise RequestAbort(
                    "internal", f"rank {self.rank} has no piece of walk `{walk}`", walk
                )
            w = req.walks[walk_id] = _WalkRun(req, walk_id, walk, piece)
        return w

    def _kill_walk(self, w: _WalkRun) -> None:
        for insts in w.waiting.values():
            for inst in insts.values():
                inst.dead = True
        w.waiting.clear()

    def _on_start(self, m: StartWalk) -> None:
        w = self._walk(m.request, m.walk_id, m.walk)
        if w is None or w.started:
            return
        w.started, w.flow, w.options = True, m.flow, dict(m.options)
        p = w.piece
        w.top_remaining = len(p.direct.get(None, ())) + len(p.children.get(None, ()))
        for cid in p.direct.get(None, ()):
            self._add_inst(w, p.calls[cid], ())
        for name in p.children.get(None, ()):
            self._start_loop(w, name, ())
        if w.top_remaining == 0:
            self._walk_done(w)

    def _walk_done(self, w: _WalkRun) -> None:
        req = w.req
        req.walks.pop(w.walk_id, None)
        req.finished_walks.add(w.walk_id)
        self._kill_walk(w)
        self.outbox(CONDUCTOR, WalkDone(req.id, w.walk_id, w.walk, self.rank))

    def _add_inst(self, w: _WalkRun, call: CallSpec, it: tuple[int, ...]) -> None:
        w.waiting.setdefault(call.id, {})[it] = _Inst(w, call, it)
        self._dirty[(id(w), call.id)] = w

    # ------------------------------------------------------------------ values in
    @staticmethod
    def _key(call: CallSpec, iters: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
        tag = dict(iters)
        key = []
        for lp in call.loops:
            if lp not in tag:
                break
            key.append(tag[lp])
        return tuple(key)

    def _on_value(self, m: Value) -> None:
        w = self._walk(m.request, m.walk_id, m.walk)
        if w is None:
            return
        call = w.piece.calls.get(m.call)
        if call is None:
            raise RequestAbort(
                "internal",
                f"rank {self.rank}: walk `{m.walk}` has no call {m.call} here (value for "
                f"`{m.port}`)",
                m.walk,
            )
        slot = (m.call, m.port)
        value = None if m.signal else m.data
        key = self._key(call, m.iters)
        port = w.piece.ports.get(slot)
        loop = port.loop if port is not None else None
        if m.edge == "loop_carried":
            w.carried.setdefault(slot, {})[key] = value
            w.carried_loop[slot] = loop or m.loop or ""
        elif m.edge == "loop_init" or (port is not None and port.mode == "carried"):
            # iteration 0's value of a carried port (an earlier loop's yield comes as
            # `terminal`, once that loop has ended)
            w.inits.setdefault(slot, {})[key] = value
            if loop or m.edge == "loop_init":
                w.carried_loop[slot] = loop or m.loop or ""
        else:
            w.values.setdefault(slot, {})[key] = value
        self._dirty[(id(w), m.call)] = w

    def _on_forward(self, m: ForwardPersisted) -> None:
        req = self._req(m.request)
        if (m.flow, m.name) not in req.persisted:
            raise RequestAbort(
                "flow", f"flow `{m.flow}` passes `{m.name}`, which no walk persisted yet", m.walk
            )
        value = req.persisted[(m.flow, m.name)]
        for d in m.dests:
            if d.kind == "call":
                self._send_value(req.id, m.walk_id, m.walk, d, (), value)
            elif d.kind == "client":
                channel = d.channel or m.input
                out = ClientOut(req.id, m.walk_id, m.walk, m.flow, d.name or "", channel, (), value)
                self.outbox(CONDUCTOR, out)
            elif d.kind == "persist":
                req.persisted[(m.flow, d.name or m.input)] = value
        if m.ack:  # no piece of the walk here: say this part of it is done
            self.outbox(CONDUCTOR, WalkDone(req.id, m.walk_id, m.walk, self.rank))

    def _send_value(self, request, walk_id, walk, d: Dest, iters, value) -> None:
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
        )
        if d.rank == self.rank or d.rank is None:
            self._on_value(msg)
        else:
            self.outbox(d.rank, msg)

    # ------------------------------------------------------------------ readiness
    @staticmethod
    def _lookup(store: dict[tuple[int, ...], Any] | None, key: tuple[int, ...]) -> Any:
        if not store:
            return _MISSING
        for k in range(len(key), -1, -1):
            v = store.get(key[:k], _MISSING)
            if v is not _MISSING:
                return v
        return _MISSING

    def _input(self, w: _WalkRun, inst: _Inst, port) -> Any:
        slot = (inst.call.id, port.port)
        if port.mode == "carried":
            loop = port.loop or w.carried_loop.get(slot)
            if loop is None or loop not in inst.call.loops:
                return _MISSING
            j = inst.call.loops.index(loop)
            if inst.it[j] == 0:
                return self._lookup(w.inits.get(slot), inst.it[:j])
            return w.carried.get(slot, {}).get(inst.it[: j + 1], _MISSING)
        return self._lookup(w.values.get(slot), inst.it)

    def _confirmed(self, w: _WalkRun, loops: tuple[str, ...], it: tuple[int, ...]):
        """The outermost unconfirmed (loop run, iteration) of a chain, or None."""
        for k, name in enumerate(loops):
            lr = w.loops.get((name, it[:k]))
            if lr is not None and not lr.confirmed(it[k]):
                return lr, it[k]
        return None

    def _ready_now(self, inst: _Inst) -> dict[str, Any] | None:
        """The instance's non-stream input values when it can run now (its stream inputs have
        a chunk ready), else None."""
        w = inst.walk
        if not w.started:
            return None
        has_stream = False
        inputs: dict[str, Any] = {}
        for p in inst.call.inputs:
            if p.mode == "stream":
                has_stream = True
                buf = self._buffer(w.req, p.src.name or "")
                if buf.ended:
                    raise RequestAbort(
                        "stream",
                        f"`{inst.call.node}` in walk `{w.walk}` needs a chunk of stream "
                        f"`{p.src.name}`, which already delivered its final chunk",
                        w.walk,
                        inst.call.node,
                    )
                if not buf.ready():
                    return None
            else:
                v = self._input(w, inst, p)
                if v is _MISSING:
                    return None
                inputs[p.port] = v
        # in a speculative iteration only stateless calls without stream inputs may run
        speculative = bool(inst.call.loops) and self._confirmed(w, inst.call.loops, inst.it)
        stateful = has_stream or self.engines.get(inst.call.node, "stateless") != "stateless"
        if speculative and stateful:
            return None
        inst.inputs = None if has_stream else inputs
        return inputs

    def _process_dirty(self) -> bool:
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

    def _run_sink(self, inst: _Inst, dest: Dest) -> None:
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

    def _mark_stream_dirty(self, req: _Request, stream: str) -> None:
        for w in req.walks.values():
            for cid in w.piece.stream_calls.get(stream, ()):
                if w.waiting.get(cid):
                    self._dirty[(id(w), cid)] = w

    # ------------------------------------------------------------------ running
    def _take_batch(self, insts: deque[_Inst]) -> list[tuple[_Inst, Work]]:
        batch: list[tuple[_Inst, Work]] = []
        seen: set[str] = set()
        skipped: list[_Inst] = []
        while insts and len(batch) < self.max_batch:
            inst = insts.popleft()
            if inst.dead or inst.walk.req.id not in self.requests:
                continue
            if inst.walk.req.id in seen:
                skipped.append(inst)  # one instance per request per batch
                continue
            inst.queued = False
            try:
                work = self._work(inst)
            except RequestAbort as exc:
                self._fail(inst.walk.req.id, exc)
                continue
            if work is None:  # a stream chunk went to another instance meanwhile
                self._dirty[(id(inst.walk), inst.call.id)] = inst.walk
                continue
            inst.walk.waiting.get(inst.call.id, {}).pop(inst.it, None)
            streams = inst.walk.piece.pushes.get(inst.call.id)
            if streams:
                inst.walk.pushing[inst.walk.piece.order_key(inst.call, inst.it)] = streams
            seen.add(inst.walk.req.id)
            batch.append((inst, work))
        insts.extendleft(reversed(skipped))
        return batch

    def _work(self, inst: _Inst) -> Work | None:
        w, call = inst.walk, inst.call
        # readiness as `_process_dirty` found it, unless a stream input must be looked at again
        inputs = inst.inputs
        inst.inputs = None
        if inputs is None:
            inputs = self._ready_now(inst)
            inst.inputs = None  # taken now: nothing to keep
            if inputs is None:
                return None
        chunks = {}
        for p in call.inputs:
            if p.mode == "stream":
                name = p.src.name or ""
                chunk = self._buffer(w.req, name).take()
                assert chunk is not None
                inputs[p.port], chunks[p.port] = chunk.data, chunk.info
                self._stream_changed(w.req, name)
        self._consume(w, inst)
        ctx = CallContext(
            request_id=w.req.id,
            walk=w.walk,
            call=call.id,
            node=call.node,
            flow=w.flow,
            loops=call.loops,
            iteration=inst.it,
            options=w.options,
            state=w.req.node_state.setdefault(call.node, {}),
            chunks=chunks,
            reads=frozenset(inputs),
            writes=w.piece.writes.get(call.id, frozenset()),
        )
        return Work(inputs, ctx)

    @staticmethod
    def _consume(w: _WalkRun, inst: _Inst) -> None:
        """Drop the per-iteration values only this instance reads."""
        if not inst.it:
            return
        for p in inst.call.inputs:
            slot = (inst.call.id, p.port)
            for store in (w.values.get(slot), w.carried.get(slot)):
                if store is not None:
                    store.pop(inst.it, None)

    def _run_batch(self, batch: list[tuple[_Inst, Work]]) -> None:
        call = batch[0][0].call
        node = self.nodes.get(call.node)
        if node is None:
            for inst, _ in batch:
                self._fail(
                    inst.walk.req.id,
                    RequestAbort(
                        "node", f"node `{call.node}` is not loaded on rank {self.rank}", None
                    ),
                )
            return
        results = self._forward(node, call.node, [wk for _, wk in batch])
        for (inst, work), result in zip(batch, results, strict=True):
            if inst.walk.req.id not in self.requests:
                continue
            w = inst.walk
            if isinstance(result, BaseException):
                msg = f"node `{call.node}` failed in walk `{w.walk}`: {type(result).__name__}: "
                self._fail(w.req.id, RequestAbort("node", msg + str(result), w.walk, call.node))
                continue
            try:
                check_outputs(
                    call.node, self.port_types.get(call.node, {}), result, work.ctx.writes
                )
            except NodeError as exc:
                self._fail(
                    w.req.id,
                    RequestAbort("output", f"{exc} (in walk `{w.walk}`)", w.walk, call.node),
                )
                continue
            try:
                self._after_call(inst, dict(result))
            except RequestAbort as exc:
                self._fail(w.req.id, exc)

    def _forward(self, node: Node, name: str, works: list[Work]) -> list[Any]:
        """One result (or exception) per work."""
        if type(node).forward is Node.forward:
            out: list[Any] = []
            for wk in works:
                try:
                    out.append(node.forward_one(wk.inputs, wk.ctx))
                except Exception as exc:
                    out.append(exc)
            return out
        try:
            res = list(node.forward(works))
        except Exception as exc:
            if len(works) > 1 and self.engines.get(name) == "stateless":
                return [r for wk in works for r in self._forward(node, name, [wk])]
            return [exc] * len(works)
        if len(res) != len(works):
            err = NodeError(f"node `{name}` returned {len(res)} results for {len(works)} calls")
            return [err] * len(works)
        return res

    # ------------------------------------------------------------------ routing
    def _after_call(self, inst: _Inst, outputs: dict[str, Any]) -> None:
        """Route a call's outputs (held while its iteration is speculative), then count it."""
        w, call = inst.walk, inst.call

        def route() -> None:
            self._route(w, call, inst.it, outputs, lambda: self._unit_done(w, call.loops, inst.it))

        self._route_or_hold(w, call.loops, inst.it, route)

    def _route_or_hold(self, w: _WalkRun, loops, it, action: Callable[[], None]) -> None:
        spec = self._confirmed(w, loops, it) if loops else None
        if spec is None:
            action()
            return
        lr, i = spec
        lr.held.setdefault(i, []).append((loops, it, action))

    def _route(self, w: _WalkRun, call: CallSpec, it, outputs: dict[str, Any], done) -> None:
        pushes: list[tuple[Dest, Any]] = []
        rest: list[tuple[Dest, Any, str, int]] = []
        for o in call.outputs:
            if o.port not in outputs:
                continue
            v = outputs[o.port]
            for k, d in enumerate(o.dests):
                if d.kind == "stream":
                    pushes.append((d, v))
                else:
                    rest.append((d, v, o.port, k))

        key = w.piece.order_key(call, it) if pushes else ()

        def finish() -> None:
            if pushes and w.pushing.pop(key, None) is not None:
                self._unpark(w)
            seen: set = set()
            for d, v, port, k in rest:
                if d.edge in ("terminal", "accumulated"):
                    self._yield(w, call, it, d, v, port, k, seen)
                else:
                    self._dest(w, call, it, d, v, port)
            done()

        if not pushes:
            finish()
            return
        streams = frozenset(d.name or "" for d, _ in pushes)

        def start() -> None:
            self._push_all(w.req, pushes, finish)

        if self._push_blocked(w, key, streams):
            w.parked.append((key, streams, start))
        else:
            start()

    def _push_blocked(self, w: _WalkRun, key: tuple[int, ...], streams: frozenset[str]) -> bool:
        """Does a push of the call instance at ``key`` have to wait? Items of one stream from
        one walk instance go in statement order (the interpreter's): every producer instance
        before it (waiting, running, or still to come in a loop instance that has not ended)
        pushes first. Earlier iterations of its own loops are done: they complete first."""
        p = w.piece
        for k, st in w.pushing.items():
            if k < key and st & streams:
                return True
        for name in streams:
            for cid in p.producers.get(name, ()):
                for it, inst in w.waiting.get(cid, {}).items():
                    if not inst.dead and p.order_key(inst.call, it) < key:
                        return True
        for (name, outer), lr in w.loops.items():
            if lr.ended or not (p.loop_pushes.get(name, frozenset()) & streams):
                continue
            lk = p.loop_key(name, outer)
            if lk < key and key[: len(lk)] != lk:
                return True
        return False

    def _unpark(self, w: _WalkRun) -> None:
        """Start the parked pushes nothing earlier holds back any more, in statement order."""
        while w.parked and w.walk_id in w.req.walks:
            w.parked.sort(key=lambda x: x[0])
            for n, (key, streams, start) in enumerate(w.parked):
                if not self._push_blocked(w, key, streams):
                    del w.parked[n]
                    start()
                    break
            else:
                return

    def _push_all(self, req: _Request, pushes: list, finish: Callable[[], None]) -> None:
        # one call's items go in its port order, each after the previous one was accepted
        if not pushes:
            finish()
            return
        (d, v), more = pushes[0], pushes[1:]
        self._push(req, d, v, lambda: self._push_all(req, more, finish))

    def _yield(
        self, w: _WalkRun, call: CallSpec, it, d: Dest, v: Any, port: str, k: int, seen
    ) -> None:
        """Keep a terminal / accumulated value for the end of loop ``d.loop`` (``k``: the
        destination's index among the port's: two equal destinations, two `emit`s, both fire)."""
        lr = self._loop_of(w, call, it, d.loop)
        key = (call.id, port)
        if (key, d.loop, d.edge) not in seen:  # one value, several destinations: keep it once
            seen.add((key, d.loop, d.edge))
            if d.edge == "terminal":
                lr.yields[key] = v
            else:
                lr.stacks.setdefault(key, []).append(v)
        lr.yield_dests.setdefault(key, {})[k] = d

    def _dest(self, w: _WalkRun, call: CallSpec, it, d: Dest, v: Any, port: str) -> None:
        req = w.req
        if d.carried and d.kind != "call":
            # an emit / persist of a loop-carried channel: fires when the next iteration starts
            lr = self._loop_of(w, call, it, d.loop)
            j = call.loops.index(d.loop)
            nxt = (*it[:j], it[j] + 1, *it[j + 1 :])
            lr.on_start.setdefault(it[j] + 1, []).append(lambda: self._sink(w, d, v, port, nxt))
            return
        if d.kind == "call":
            tag = tuple(zip(call.loops, it, strict=True))
            if d.carried and d.loop in call.loops:
                j = call.loops.index(d.loop)
                lr = self._loop_of(w, call, it, d.loop)
                if it[j] + 1 >= lr.spec.max or lr.stops.get(it[j]) is True:
                    return  # no next iteration: the last iteration's value is never delivered
                tag = (*tag[:j], (d.loop, it[j] + 1))
            self._send_value(req.id, w.walk_id, w.walk, d, tag, v)
        elif d.kind == "until":
            j = call.loops.index(d.loop) if d.loop in call.loops else len(it) - 1
            stop = _truth(v)
            msg = Until(req.id, w.walk_id, w.walk, d.loop or "", it[:j], it[j], stop)
            for r in d.ranks or (self.rank,):
                if r == self.rank:
                    self._on_until(msg)
                else:
                    self.outbox(r, msg)
        else:
            self._sink(w, d, v, port, it)

    def _sink(self, w: _WalkRun, d: Dest, v: Any, channel: str, it) -> None:
        if d.kind == "client":
            channel = d.channel or channel
            msg = ClientOut(w.req.id, w.walk_id, w.walk, w.flow, d.name or "", channel, it, v)
            self.outbox(CONDUCTOR, msg)
        elif d.kind == "persist":
            w.req.persisted[(w.flow, d.name or channel)] = v

    def _loop_of(self, w: _WalkRun, call: CallSpec, it, loop: str | None) -> _LoopRun:
        if loop not in call.loops:
            raise RequestAbort(
                "internal",
                f"walk `{w.walk}`: call {call.id} (`{call.node}`) routes to loop `{loop}`, "
                "which does not enclose it",
                w.walk,
                call.node,
            )
        j = call.loops.index(loop)
        return w.loops[(loop, it[:j])]

    # ------------------------------------------------------------------ loops
    def _start_loop(self, w: _WalkRun, name: str, outer: tuple[int, ...]) -> None:
        spec = w.piece.loops[name]
        lr = _LoopRun(spec, outer, w.piece.chain[name])
        lr.stops.update(w.early_stops.pop((name, outer), {}))
        w.loops[(name, outer)] = lr
        self._start_iteration(w, lr)

    def _start_iteration(self, w: _WalkRun, lr: _LoopRun) -> None:
        i = lr.started
        lr.started += 1
        name = lr.spec.name
        it = (*lr.outer, i)
        p = w.piece
        lr.remaining[i] = len(p.direct.get(name, ())) + len(p.children.get(name, ()))
        for cid in p.direct.get(name, ()):
            self._add_inst(w, p.calls[cid], it)
        for child in p.children.get(name, ()):
            self._start_loop(w, child, it)
        for effect in lr.on_start.pop(i, ()):
            self._route_or_hold(w, lr.chain, it, effect)
        if lr.remaining[i] == 0:
            self._iteration_complete(w, lr, i)

    def _unit_done(self, w: _WalkRun, loops: tuple[str, ...], it: tuple[int, ...]) -> None:
        if w.walk_id not in w.req.walks:
            return
        if not loops:
            w.top_remaining -= 1
            if w.top_remaining == 0:
                self._walk_done(w)
            return
        lr = w.loops.get((loops[-1], it[:-1]))
        if lr is None or lr.ended:
            return
        i = it[-1]
        lr.remaining[i] -= 1
        if lr.remaining[i] == 0:
            self._iteration_complete(w, lr, i)

    def _iteration_complete(self, w: _WalkRun, lr: _LoopRun, i: int) -> None:
        lr.completed = max(lr.completed, i)
        self._advance(w, lr)

    def _advance(self, w: _WalkRun, lr: _LoopRun) -> None:
        if lr.ended:
            return
        i = lr.completed
        if lr.last is not None and i >= lr.last:
            self._end_loop(w, lr)
            return
        if i < 0 or lr.started > i + 1:
            return
        if i + 1 >= lr.spec.max:
            lr.last = i
            self._end_loop(w, lr)
            return
        if lr.spec.until is None or lr.stops.get(i) is False:
            self._start_iteration(w, lr)
            return
        if lr.stops.get(i) is True:
            lr.last = i
            self._end_loop(w, lr)
            return
        # stop_i unknown: at most one speculative step, and only when the loop allows it
        if lr.spec.speculate and lr.confirmed(i):
            self._start_iteration(w, lr)

    def _on_until(self, m: Until) -> None:
        w = self._walk(m.request, m.walk_id, m.walk)
        if w is None:
            return
        lr = w.loops.get((m.loop, m.outer))
        if lr is None:
            w.early_stops.setdefault((m.loop, m.outer), {})[m.iteration] = m.stop
            return
        if lr.ended or (lr.last is not None and m.iteration > lr.last):
            return
        lr.stops[m.iteration] = m.stop
        if m.stop:
            lr.last = m.iteration
            for j in range(m.iteration + 1, lr.started):
                self._discard_iteration(w, lr, j)
        else:
            self._release_held(w, lr, m.iteration + 1)
        self._advance(w, lr)

    def _release_held(self, w: _WalkRun, lr: _LoopRun, i: int) -> None:
        """Iteration i is confirmed: release its held effects, let its stateful calls run."""
        for loops, it, action in lr.held.pop(i, ()):
            self._route_or_hold(w, loops, it, action)
        prefix = (*lr.outer, i)
        n = len(prefix)
        for cid, insts in w.waiting.items():
            if w.piece.calls[cid].loops[:n] == lr.chain and any(it[:n] == prefix for it in insts):
                self._dirty[(id(w), cid)] = w

    def _discard_iteration(self, w: _WalkRun, lr: _LoopRun, i: int) -> None:
        """Drop a speculative iteration whose loop already ended: nothing of it is visible."""
        lr.held.pop(i, None)
        lr.on_start.pop(i, None)
        prefix = (*lr.outer, i)
        n = len(prefix)
        # only what is inside this loop: a sibling loop's iteration i has the same prefix
        inside = lr.chain
        for cid, insts in w.waiting.items():
            if w.piece.calls[cid].loops[:n] != inside:
                continue
            for it in [it for it in insts if it[:n] == prefix]:
                insts.pop(it).dead = True
        for key in [
            k
            for k in w.loops
            if w.piece.chain[k[0]][:n] == inside and len(k[1]) >= n and k[1][:n] == prefix
        ]:
            del w.loops[key]
        if w.pushing or w.parked:  # its producer instances will never push
            head = (*w.piece.loop_key(lr.spec.name, lr.outer), i)
            for k in [k for k in w.pushing if k[: len(head)] == head]:
                del w.pushing[k]
            w.parked = [x for x in w.parked if x[0][: len(head)] != head]
            self._unpark(w)

    def _end_loop(self, w: _WalkRun, lr: _LoopRun) -> None:
        if lr.ended:
            return
        lr.ended = True
        assert lr.last is not None
        for j in range(lr.last + 1, lr.started):
            self._discard_iteration(w, lr, j)
        lr.on_start.clear()
        tag = tuple(zip(lr.chain[:-1], lr.outer, strict=True))
        for key, dests in lr.yield_dests.items():
            for d in dests.values():
                if d.edge == "terminal":
                    v = lr.yields.get(key)
                else:
                    vals = lr.stacks.get(key, [])
                    if any(x is None for x in vals):
                        raise RequestAbort(
                            "internal",
                            f"`yield all` of loop `{lr.spec.name}` has a bare signal",
                            w.walk,
                        )
                    v = torch.stack(vals) if vals else None
                if d.kind == "call":
                    self._send_value(w.req.id, w.walk_id, w.walk, d, tag, v)
                else:
                    self._sink(w, d, v, key[1], lr.outer)
        w.loops.pop((lr.spec.name, lr.outer), None)
        if w.parked:
            self._unpark(w)
        self._unit_done(w, lr.chain[:-1], lr.outer)

    # ------------------------------------------------------------------ streams
    def _buffer(self, req: _Request, name: str) -> StreamBuffer:
        buf = req.streams.get(name)
        if buf is not None:
            return buf
        s = self.stream_specs.get(name)
        if s is None:
            raise RequestAbort("internal", f"rank {self.rank} does not own stream `{name}`")
        item = s.item
        shape = tuple(int(d) for d in item.dims) if item is not None and item.is_static else None
        buf = StreamBuffer(
            Policy.of(s.policy, dict(s.params)),
            s.final,
            s.after_done,
            capacity=s.capacity,
            item_shape=shape,
            dtype=DTYPES.get(item.dtype) if item is not None else None,
            name=name,
        )
        req.streams[name] = buf
        return buf

    def _push(self, req: _Request, d: Dest, v: Any, cont: Callable[[], None]) -> None:
        name = d.name or ""
        if d.rank is None or d.rank == self.rank:
            self._enqueue_item(req, name, (0, self.rank, v, cont))
            return
        self._seq += 1
        req.acks[self._seq] = cont
        self.outbox(d.rank, StreamItem(req.id, name, self._seq, self.rank, v))

    def _on_stream_item(self, m: StreamItem) -> None:
        self._enqueue_item(self._req(m.request), m.stream, (m.seq, m.src_rank, m.data, None))

    def _on_stream_ack(self, m: StreamAck) -> None:
        req = self.requests.get(m.request)
        cont = req.acks.pop(m.seq, None) if req else None
        if cont is not None:
            try:
                cont()
            except RequestAbort as exc:
                self._fail(m.request, exc)

    def _enqueue_item(self, req: _Request, name: str, entry) -> None:
        self._buffer(req, name)
        req.stream_pending.setdefault(name, deque()).append(entry)
        self._stream_changed(req, name)

    def _stream_changed(self, req: _Request, name: str) -> None:
        """Accept waiting items while there is room, tell the conductor about a ready chunk,
        and wake the consumer calls."""
        buf = self._buffer(req, name)
        pending = req.stream_pending.get(name)
        while pending and buf.can_push():
            seq, src, item, cont = pending.popleft()
            try:
                buf.push(item)
            except StreamError as exc:
                raise RequestAbort("stream", str(exc)) from exc
            if cont is not None:
                cont()
            else:
                self.outbox(src, StreamAck(req.id, name, seq))
            if req.id not in self.requests:
                return
        if not buf.final_taken and buf.ready() and req.notified.get(name, -1) < buf.taken:
            j = buf.taken
            final = False
            if buf.is_done:
                plan = chunk_plan(buf.policy, buf.final, buf.produced)
                final = j < len(plan) and plan[j][2]
            req.notified[name] = j
            self.outbox(CONDUCTOR, ChunkReady(req.id, name, j, buf.next_is_empty(), final))
        self._mark_stream_dirty(req, name)

    def _on_stream_done(self, m: StreamDone) -> None:
        req = self._req(m.request)
        self._buffer(req, m.stream).done()
        self._stream_changed(req, m.stream)

    def _on_stream_abandon(self, m: StreamAbandon) -> None:
        req = self._req(m.request)
        self._buffer(req, m.stream).abandon()
        self._stream_changed(req, m.stream)

    def _on_skip_chunk(self, m: SkipChunk) -> None:
        req = self._req(m.request)
        buf = self._buffer(req, m.stream)
        if buf.taken == m.index and not buf.final_taken and buf.ready():
            buf.take()
        self._stream_changed(req, m.stream)

    # ------------------------------------------------------------------ node-state handoffs
    def _on_export_state(self, m: ExportState) -> None:
        """Move the request's state of ``m.node`` to its new group (a plan handoff)."""
        req = self._req(m.request)
        node = self.nodes.get(m.node)
        if node is None:
            raise RequestAbort(
                "internal", f"rank {self.rank} cannot export the state of `{m.node}`: not loaded"
            )
        kept = req.node_state.pop(m.node, {})
        try:
            state = dict(node.export_state(m.request, kept))
        except Exception as exc:
            raise RequestAbort(
                "node",
                f"node `{m.node}` failed to export its state on rank {self.rank}: "
                f"{type(exc).__name__}: {exc}",
                node=m.node,
            ) from exc
        if len(m.from_ranks) == len(m.to_ranks):
            k = m.from_ranks.index(self.rank) if self.rank in m.from_ranks else 0
            targets: tuple[int, ...] = (m.to_ranks[k],)
        elif m.from_ranks and m.from_ranks[0] == self.rank:
            targets = m.to_ranks
        else:
            targets = ()  # another rank of the group sends it; this shard only drops its copy
        for to in targets:
            for key, value in state.items():
                self._send_state(to, StatePart(m.request, m.walk_id, m.node, key, self.rank, value))
            self._send_state(to, StateEnd(m.request, m.walk_id, m.node, self.rank, len(state)))

    def _send_state(self, to: int, msg: Message) -> None:
        if to == self.rank:
            self.deliver(msg)
        else:
            self.outbox(to, msg)

    def _on_state_part(self, m: StatePart) -> None:
        req = self._req(m.request)
        key = (m.walk_id, m.node, m.src_rank)
        req.incoming.setdefault(key, {})[m.key] = m.data
        self._maybe_import(req, key)

    def _on_state_end(self, m: StateEnd) -> None:
        req = self._req(m.request)
        key = (m.walk_id, m.node, m.src_rank)
        req.incoming.setdefault(key, {})
        req.incoming_parts[key] = m.parts
        self._maybe_import(req, key)

    def _maybe_import(self, req: _Request, key: tuple[int, str, int]) -> None:
        parts = req.incoming_parts.get(key)
        if parts is None or len(req.incoming.get(key, ())) < parts:
            return
        state = req.incoming.pop(key)
        del req.incoming_parts[key]
        walk_id, name, _ = key
        node = self.nodes.get(name)
        if node is None:
            raise RequestAbort(
                "internal", f"rank {self.rank} cannot import the state of `{name}`: not loaded"
            )
        try:
            node.import_state(req.id, state, req.node_state.setdefault(name, {}))
        except Exception as exc:
            raise RequestAbort(
                "node",
                f"node `{name}` failed to import its state on rank {self.rank}: "
                f"{type(exc).__name__}: {exc}",
                node=name,
            ) from exc
        self.outbox(CONDUCTOR, StateImported(req.id, walk_id, name, self.rank))

    # ------------------------------------------------------------------ failures
    def _fail(self, request: str | None, exc: RequestAbort) -> None:
        if request is None or request in self.ended:
            return
        req = self.requests.get(request)
        flow = (
            next((w.flow for w in req.walks.values() if w.walk == exc.walk), None) if req else None
        )
        self.outbox(
            CONDUCTOR,
            Failed(request, exc.kind, exc.message, flow, exc.walk, exc.node, self.rank),
        )
        self.release(request)


def _truth(v: Any) -> bool:
    """A stop value: a bare signal or an empty tensor is false."""
    if v is None:
        return False
    if isinstance(v, torch.Tensor):
        return bool(v.reshape(-1)[0].item()) if v.numel() else False
    return bool(v)
