"""Batching (`Batcher`): ready call instances of one (walk, call) run together in one
`Node.forward`, or in the call's captured step when the plan lists it and the node offers one
(`captured`).

Up to ``max_batch``, at most one instance per request (a batch never mixes two iterations or two
walk instances of one request). Nodes that keep the default `Node.forward` run item by item
here, so a raising item fails only its request. A custom batched `forward` fails one item by
returning an exception in that item's place; a batched `forward` that raises is retried item by
item when the node is stateless, and fails every request of the batch when it keeps state
(re-running would apply its state changes twice). Every result is checked against the node's
declared output ports. A node's exception is the request's fault (`Cause.INPUT`) when it is a
`NodeInputError` (the node refused a value it was given, and said so), else the deployment's
(`Cause.INTERNAL`: a stray `ValueError` may be a bug, e.g. a KV append of the wrong shape).
Each call's time and rows go to `NodeStats`. The messages a batch's routing sends leave
after it, per destination in order, a run of stream items for one owner as one `StreamItems`
(a decode step of n requests sends one message to the stream's owner, not n). A batch may
hold a node's ``like`` copies' calls too (`merging`): it runs in the owner's `forward`, each
call checked and routed as its own.

`Batcher` owns the batch size, the nodes' declared output types (what results are checked
against) and the merging of copies (`merging.Merger`); it takes ready instances from `Values`'
queues, round robin, one batch a step.
"""

from __future__ import annotations

from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.kinds import Cause, Engine, FailKind, InputMode
from wgc_runtime.contract.messages import Message, pack_items
from wgc_runtime.contract.node import (
    CallContext,
    Node,
    NodeError,
    NodeInputError,
    Work,
    check_outputs,
)
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.core.executor.captured import CapturedSteps
from wgc_runtime.core.executor.lanes import Lanes
from wgc_runtime.core.executor.merging import Merger
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.state import Inst, RequestAbort
from wgc_runtime.core.executor.stats import NodeStats
from wgc_runtime.core.executor.values import Fail, Values, consume
from wgc_runtime.core.post import Post
from wgc_runtime.engines.kv_pools import KvPools

if TYPE_CHECKING:
    from collections import deque

    from wgc_runtime.core.executor.routing import Router
    from wgc_runtime.core.executor.streams import Streams

Batch = list[tuple[Inst, Work]]


class Batcher:
    """Forms and runs the rank's batches (see the module docstring)."""

    def __init__(
        self,
        rank_spec: RankSpec,
        nodes: Mapping[str, Node],
        max_batch: int,
        *,
        engines: dict[str, Engine],
        captured: CapturedSteps,
        kv: KvPools,
        stats: NodeStats,
        post: Post,
        requests: Requests,
        values: Values,
        streams: Streams,
        router: Router,
        fail: Fail,
        lanes: Lanes,
    ) -> None:
        self.rank = rank_spec.rank
        self.nodes = nodes
        self.max_batch = max(1, int(max_batch))
        self.engines = engines
        # every node's declared output types: what its results are checked against
        self.port_types: dict[str, dict[str, Any]] = {
            n.name: dict(n.outputs) for n in rank_spec.nodes
        }
        self.captured, self.kv, self.stats, self.post = captured, kv, stats, post
        self.live = requests.by_id  # the requests kept here (a dropped one's rows are skipped)
        self.values, self.streams, self.router, self.fail = values, streams, router, fail
        self.ready = values.ready
        self.lanes = lanes  # running decode calls' rows, stepped wholesale (`lanes`)
        self._lane_turn = False
        # copies whose calls run in their owner's batches (`merging`)
        self.merger = Merger(rank_spec, nodes, requests.pieces, self)

    def run_next(self) -> bool:
        """Run one batch from the ready queues, round robin; False when none was ready."""
        lanes = self.lanes
        if lanes.lanes:  # a lane's step and a ready queue's batch take turns
            self._lane_turn = not self._lane_turn
            if self._lane_turn and lanes.run_next():
                return True
        ready = self.ready
        while ready:
            key, insts = next(iter(ready.items()))
            del ready[key]
            batch = self.take(insts)
            if insts:
                ready[key] = insts  # the rest waits for the next step (round robin)
            if batch:
                if self.merger.owner:
                    batch = self.merger.take_merged(key, batch)
                self.run(batch)
                return True
        return bool(lanes.lanes) and lanes.run_next()

    def take(self, insts: deque[Inst]) -> Batch:
        """Up to ``max_batch`` instances from one queue, at most one per request."""
        batch: Batch = []
        seen: set[str] = set()
        skipped: list[Inst] = []
        live = self.live
        while insts and len(batch) < self.max_batch:
            inst = insts.popleft()
            if inst.dead or inst.walk.req.id not in live:
                continue
            if inst.walk.req.id in seen:
                skipped.append(inst)  # one instance per request per batch
                continue
            inst.queued = False
            try:
                work = self.work(inst)
            except RequestAbort as exc:
                self.fail(inst.walk.req.id, exc)
                continue
            if work is None:  # a stream chunk went to another instance meanwhile
                self.values.mark(inst.walk, inst.call.id)
                continue
            inst.walk.waiting.get(inst.call.id, {}).pop(inst.it, None)
            streams = inst.walk.piece.pushes.get(inst.call.id)
            if streams:
                inst.key = inst.walk.piece.order_key(inst.call, inst.it)
                inst.walk.pushing[inst.key] = streams
            seen.add(inst.walk.req.id)
            batch.append((inst, work))
        insts.extendleft(reversed(skipped))
        return batch

    def work(self, inst: Inst) -> Work | None:
        """The instance's inputs (its stream chunks taken) and call context."""
        w, call = inst.walk, inst.call
        # readiness as `Values.process_dirty` found it, unless a stream input must be looked
        # at again
        inputs = inst.inputs
        inst.inputs = None
        if inputs is None:
            inputs = self.values.ready_now(inst)
            inst.inputs = None  # taken now: nothing to keep
            if inputs is None:
                return None
        chunks: dict[str, Any] = {}
        for p in call.inputs:
            if p.mode is InputMode.STREAM:
                name = p.src.name or ""
                chunk = self.streams.inlet(w.req, name).buf.take()
                assert chunk is not None
                inputs[p.port], chunks[p.port] = chunk.data, chunk.info
                self.streams.changed(w.req, name)
        consume(w, inst)
        kv = w.req.kv_handles.get(call.node)
        if kv is None and self.kv.has(call.node):
            kv = w.req.kv_handles[call.node] = self.kv.handle(call.node, w.req.id)
        ctx = CallContext(
            request_id=w.req.node_id,
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
            kv=kv,
        )
        return Work(inputs, ctx)

    def run(self, batch: Batch) -> None:
        """Run one batch: its captured step or its node's `forward`, then route each row."""
        call = batch[0][0].call
        # copies' calls too (`merging`): looked for only on a rank where some node merges
        owners = self.merger.owner
        merged = bool(owners) and any(inst.call is not call for inst, _ in batch)
        name = owners[call.node] if merged else call.node
        node = self.nodes.get(name)
        if node is None:
            for inst, _ in batch:
                self.fail(
                    inst.walk.req.id,
                    RequestAbort(
                        FailKind.NODE, f"node `{name}` is not loaded on rank {self.rank}", None
                    ),
                )
            return
        works = [wk for _, wk in batch]
        results: list[Any] | None = None
        checked = False  # a captured step's outputs were checked once for the whole batch
        t0 = perf_counter()
        try:  # a step's failure (choosing its form, or running) fails its batch
            unit = None if merged else self.captured.unit(batch[0][0].walk.walk, call.id, works)
            if unit is not None:
                results = self.captured.run(unit, works)  # its appends are made
                checked = results is not None
        except Exception as exc:
            results = [exc] * len(works)
        if results is None:
            results = self.forward(node, name, works)
        seconds = perf_counter() - t0
        if merged:  # each node its rows, and the batch's time shared by rows
            rows: dict[str, int] = {}
            for inst, _ in batch:
                rows[inst.call.node] = rows.get(inst.call.node, 0) + 1
            for n, k in rows.items():
                self.stats.call(n, k, seconds * k / len(batch))
        else:
            self.stats.call(call.node, len(works), seconds)
        if len(batch) == 1 or not batch[0][0].walk.piece.pushes.get(call.id):
            self.route_results(batch, results, checked)  # no stream items to pack
            return
        post = self.post
        send = post.send
        held: dict[int, list[Message]] = {}  # the batch's messages, per destination in order

        def hold(to: int, msg: Message) -> None:
            held.setdefault(to, []).append(msg)

        post.send = hold
        try:
            self.route_results(batch, results, checked)
        finally:
            post.send = send
            for to, msgs in held.items():
                # a step's stream items for one owner leave as one message (`StreamItems`)
                for msg in pack_items(msgs) if len(msgs) > 1 else msgs:
                    send(to, msg)

    def route_results(self, batch: Batch, results: list[Any], checked: bool) -> None:
        """Fail or route each call of a batch by its result."""
        live = self.live
        for (inst, work), result in zip(batch, results, strict=True):
            if inst.walk.req.id not in live:
                continue
            w, call = inst.walk, inst.call
            if isinstance(result, BaseException):
                msg = f"node `{call.node}` failed in walk `{w.walk}`: {type(result).__name__}: "
                cause = Cause.INPUT if isinstance(result, NodeInputError) else Cause.INTERNAL
                abort = RequestAbort(FailKind.NODE, msg + str(result), w.walk, call.node, cause)
                self.fail(w.req.id, abort)
                continue
            try:
                if not checked:
                    types = self.port_types.get(call.node, {})
                    check_outputs(call.node, types, result, work.ctx.writes)
            except NodeError as exc:
                self.fail(
                    w.req.id,
                    RequestAbort(FailKind.OUTPUT, f"{exc} (in walk `{w.walk}`)", w.walk, call.node),
                )
                continue
            try:  # a captured step's rows are dicts of its own; a node's result is copied
                self.router.after_call(inst, result if checked else dict(result))
            except RequestAbort as exc:
                self.fail(w.req.id, exc)

    def forward(self, node: Node, name: str, works: list[Work]) -> list[Any]:
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
            if len(works) > 1 and self.engines.get(name) is Engine.STATELESS:
                return [r for wk in works for r in self.forward(node, name, [wk])]
            return [exc] * len(works)
        if len(res) != len(works):
            err = NodeError(f"node `{name}` returned {len(res)} results for {len(works)} calls")
            return [err] * len(works)
        return res
