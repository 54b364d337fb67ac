"""Generated dispatch (`DirectRuns`): a plain piece runs as the code its rank module holds
(`PieceSpec.direct`, written by `wgc.codegen.direct`), not through the generic parts.

A plain piece is a chain of stateless calls on this rank with no loop, stream, sink or capture,
one value in from elsewhere, starting on it. When that value arrives carrying the walk's header,
the executor makes the walk run, as it would, and hands the value to the generated ``run``: it
calls node after node with the values as local variables (no `Inst`, no readiness, no ready
queue, no `Value` between calls here) and sends what leaves the rank through the router's own
senders (`Router.send_value`, `Router.sink`: the same messages, headers included). The piece is
then done (`RankExecutor._walk_done`: `WalkDone`, retiring, releases as before).

What keeps its meaning: each call gets its `CallContext` (request, walk, call id, node, flow,
options, the request's state dict for the node, reads and writes) and runs the node's
`forward_one` (a node that keeps `Node.forward`) or its `forward` on one `Work`; its time goes
to `NodeStats`; its result is checked against the node's declared ports (`check_outputs`); a
node that raises (or returns an exception, or the wrong number of results) fails the request
with the same `Failed` as the batcher's (`FailKind.NODE`, `Cause.INPUT` for a
`NodeInputError`), wrong outputs with `FailKind.OUTPUT`, and the calls after it do not run. A
piece runs to its end inside one message: a cancellation or deadline that lands meanwhile ends
the request as before, and the rank drops what the request sends or receives after it ended.

Not taken (the generic executor runs the piece): ``direct`` off (``WGC_DIRECT=0`` for workers,
``direct=False`` for `LocalCluster`), a node of the piece not loaded here, or a node with a
batched `forward` on a rank that batches (``max_batch`` > 1): there ready calls of concurrent
requests share one `forward`, which running each request's piece on arrival would give up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from wgc_runtime.contract.kinds import Cause, DestKind, FailKind, SourceKind
from wgc_runtime.contract.messages import Value
from wgc_runtime.contract.node import (
    CallContext,
    Node,
    NodeError,
    NodeInputError,
    Work,
    check_outputs,
)
from wgc_runtime.contract.spec import PieceSpec, RankSpec
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.routing import Router
from wgc_runtime.core.executor.sessions import RankSessions
from wgc_runtime.core.executor.state import RequestAbort, WalkRun
from wgc_runtime.core.executor.stats import NodeStats

Caller = Callable[[WalkRun, dict[str, Any]], dict[str, Any]]
Sender = Callable[[WalkRun, Any], None]
Run = Callable[[WalkRun, Any], None]


@dataclass(frozen=True, slots=True)
class Entry:
    """A plain piece's way in: the call and port its one value is for, and its ``run``."""

    call: int
    port: str
    run: Run


class Binder:
    """What a generated ``direct_<walk>(bind)`` binds, once, when the executor is built: a
    caller per call (`call`) and a sender per destination off the rank (`send`)."""

    def __init__(
        self,
        piece: PieceSpec,
        nodes: Mapping[str, Node],
        port_types: Mapping[str, Mapping[str, Any]],
        writes: Mapping[int, frozenset[str]],
        stats: NodeStats,
        router: Router,
    ) -> None:
        self.piece, self.nodes, self.port_types = piece, nodes, port_types
        self.writes, self.stats, self.router = writes, stats, router

    def call(self, cid: int) -> Caller:
        """Run call ``cid`` of walk run ``w`` on ``inputs``: its checked outputs, or
        `RequestAbort` (see the module docstring)."""
        c = self.piece.call(cid)
        assert c is not None, f"walk `{self.piece.walk}` has no call {cid}"
        walk, name, node = self.piece.walk, c.node, self.nodes[c.node]
        types = dict(self.port_types.get(name, {}))
        reads = frozenset(p.port for p in c.inputs)
        writes = self.writes.get(cid, frozenset())
        one_by_one = type(node).forward is Node.forward
        forward_one, forward, count = node.forward_one, node.forward, self.stats.call

        def call(w: WalkRun, inputs: dict[str, Any]) -> dict[str, Any]:
            req = w.req
            state = req.node_state.get(name)
            if state is None:
                state = req.node_state[name] = {}
            ctx = CallContext(
                request_id=req.node_id,
                walk=walk,
                call=cid,
                node=name,
                flow=w.flow,
                options=w.options,
                state=state,
                reads=reads,
                writes=writes,
            )
            t0 = perf_counter()
            result: Any
            try:
                if one_by_one:
                    result = forward_one(inputs, ctx)
                else:
                    results = list(forward([Work(inputs, ctx)]))
                    if len(results) != 1:
                        result = NodeError(
                            f"node `{name}` returned {len(results)} results for 1 calls"
                        )
                    else:
                        result = results[0]
            except Exception as exc:
                result = exc
            count(name, 1, perf_counter() - t0)
            if isinstance(result, BaseException):
                raise _failed(name, walk, result) from result
            try:
                check_outputs(name, types, result, writes)
            except NodeError as exc:
                raise RequestAbort(
                    FailKind.OUTPUT, f"{exc} (in walk `{walk}`)", walk, name
                ) from exc
            return result

        return call

    def send(self, cid: int, port: str, k: int) -> Sender:
        """Send a value of call ``cid``'s output ``port`` to its ``k``-th destination (a call
        on another rank, or the client), as the router does."""
        c = self.piece.call(cid)
        assert c is not None, f"walk `{self.piece.walk}` has no call {cid}"
        d = next(o for o in c.outputs if o.port == port).dests[k]
        if d.kind is DestKind.CLIENT:
            sink = self.router.sink

            def to_client(w: WalkRun, value: Any) -> None:
                sink(w, d, value, port, ())

            return to_client
        send_value = self.router.send_value

        def to_rank(w: WalkRun, value: Any) -> None:
            send_value(w.req.id, w.walk_id, w.walk, d, (), value, w)

        return to_rank


def _failed(name: str, walk: str, exc: BaseException) -> RequestAbort:
    """A node's exception as the request's failure, worded as the batcher words it."""
    msg = f"node `{name}` failed in walk `{walk}`: {type(exc).__name__}: {exc}"
    cause = Cause.INPUT if isinstance(exc, NodeInputError) else Cause.INTERNAL
    return RequestAbort(FailKind.NODE, msg, walk, name, cause)


class DirectRuns:
    """The plain pieces of one rank that run as generated code (see the module docstring)."""

    def __init__(
        self,
        rank_spec: RankSpec,
        nodes: Mapping[str, Node],
        max_batch: int,
        *,
        enabled: bool,
        table: Requests,
        stats: NodeStats,
        router: Router,
        sessions: RankSessions,
        done: Callable[[WalkRun], None],
    ) -> None:
        self.table, self.sessions, self.done = table, sessions, done
        self.entries: dict[str, Entry] = {}
        if not enabled:
            return
        port_types = {n.name: dict(n.outputs) for n in rank_spec.nodes}
        for p in rank_spec.pieces:
            if p.direct is None or not _usable(p, nodes, max_batch):
                continue
            entry = _entry(p)
            if entry is None:
                continue
            writes = table.pieces[p.walk].writes
            bind = Binder(p, nodes, port_types, writes, stats, router)
            self.entries[p.walk] = Entry(entry[0], entry[1], p.direct(bind))

    def take(self, m: Value) -> bool:
        """Run the plain piece ``m`` starts, if it starts one; False: the generic executor
        takes the value. A node's failure raises `RequestAbort` (the executor fails the
        request)."""
        e = self.entries.get(m.walk)
        if (
            e is None
            or m.options is None
            or m.signal
            or m.iters
            or m.call != e.call
            or m.port != e.port
        ):
            return False
        w = self.table.walk(m.request, m.walk_id, m.walk)
        if w is None:
            return True  # a late value for a finished walk run: dropped, as the router does
        if w.started:
            return False
        w.started, w.flow, w.options = True, m.flow, dict(m.options)
        self.sessions.begin(w)
        e.run(w, m.data)
        self.done(w)
        return True


def _usable(p: PieceSpec, nodes: Mapping[str, Node], max_batch: int) -> bool:
    """Every node of the piece is loaded, and none loses a batch by running alone."""
    for c in p.calls:
        node = nodes.get(c.node)
        if node is None:
            return False
        if max_batch > 1 and type(node).forward is not Node.forward:
            return False
    return True


def _entry(p: PieceSpec) -> tuple[int, str] | None:
    """The one (call, port) of the piece fed from elsewhere."""
    found = [
        (c.id, port.port)
        for c in p.calls
        for port in c.inputs
        if not (port.src.kind is SourceKind.CALL and port.src.rank == p.rank)
    ]
    return found[0] if len(found) == 1 else None
