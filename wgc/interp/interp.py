"""One request on the reference interpreter: flows side by side, nodes called eagerly.

Which flows run: every plain flow, every `when` flow whose condition holds, every `on` flow,
every escape-hatch flow. They run side by side under a deterministic round-robin scheduler:
each flow runs until it blocks (a stream chunk not ready, a full stream), then the next one.
When no flow can move and some are blocked, the request fails with a deadlock error naming what
each one waits for; nothing ever hangs.

Streams (`wgc_runtime.core.streams.StreamBuffer`, one per stream per request): every value a
producer port returns, in any call of its node, is pushed (waiting while the buffer is full);
every call of the consumer node takes the next chunk (waiting until it is ready) and sees its
`ChunkInfo` in `CallContext.chunks`. A stream's producer is *done* when every running flow that
can call a walk with a call of the producer node has ended (escape-hatch flows can call any
walk). When every flow that could consume a stream has ended, or none runs, the stream is
abandoned: later items are dropped instead of stalling the producer. An `on` flow runs its body
once per chunk and ends after the final chunk; it skips an *empty* chunk (nothing to process:
the final chunk when no residual is delivered, e.g. an exact multiple of the chunk size, a
stream of no item, or always under `final drop`).

`persist` stores a channel in the flow's own store (flows run side by side, so a flow only
reads what its own walks persisted); nodes keep per-request state in `CallContext.state`, one
dict per node, released when the request ends. A kv-cache node's cache is a paged pool
(`wgc_runtime.engines.kv_pools`, the runtime's own), one per node, sized like the plan sizes it
(``kv_pages`` pages of the default page size, ``kv_dtype``): a ``like X { label L }`` copy reads
X's label L in X's pool, as it does on X's rank group.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wgc.interp.flows import FlowRun, eval_cond, walks_of
from wgc.interp.request import Emitted, Outputs, RequestError, RequestFailed
from wgc.interp.walks import Steps, Wait, WalkPlan, WalkRun
from wgc.ir.decls import POLICY_PARAMS, EngineKind, Stream
from wgc.ir.decls import Node as NodeDecl
from wgc.ir.flow import FlowKind
from wgc.ir.model import Model
from wgc.ir.types import Dim, DimKind, TensorType
from wgc.ir.walk import Call
from wgc.lower.kv import owner_of, pool_spec
from wgc_runtime.contract.families import resolve_impl
from wgc_runtime.contract.flow import SimpleRequest
from wgc_runtime.contract.node import (
    DTYPES,
    CallContext,
    Node,
    NodeContext,
    NodeError,
    Work,
    check_outputs,
)
from wgc_runtime.contract.spec import KvCacheSpec, TypeSpec
from wgc_runtime.core.streams import Policy, StreamBuffer, StreamError
from wgc_runtime.engines.kv_pools import KvPools


def type_spec(t: TensorType | None) -> TypeSpec | None:
    """The runtime's view of a port type: static dims as ints, a bounded dim as ``<=N`` (its
    bound's value), others by name (``?``)."""
    if t is None:
        return None
    return TypeSpec(t.dtype.value, tuple(_dim(d) for d in t.dims))


def _dim(d: Dim) -> int | str:
    if d.kind in (DimKind.INT, DimKind.PARAM) and d.value is not None:
        return int(d.value)
    return f"<={d.value}" if d.kind is DimKind.BOUNDED else (d.name or "?")


def node_context(n: NodeDecl, device: str = "cpu") -> NodeContext:
    return NodeContext(
        name=n.name,
        impl=n.impl or "",
        config=dict(n.config),
        device=device,
        engine=n.engine.value,
        labels=n.labels,
        inputs={p.name: type_spec(p.type) for p in n.inputs},
        outputs={p.name: type_spec(p.type) for p in n.outputs},
    )


def load_nodes(model: Model, only: set[str] | None = None, device: str = "cpu") -> dict[str, Node]:
    """Instantiate every node's `impl` (``module:Class``) with its `NodeContext`."""
    out: dict[str, Node] = {}
    for n in model.nodes:
        if only is not None and n.name not in only:
            continue
        module, _, cls = resolve_impl(n.impl or "").partition(":")
        out[n.name] = getattr(importlib.import_module(module), cls)(node_context(n, device))
    return out


def stream_buffer(s: Stream, model: Model, capacity: int | None = None) -> StreamBuffer:
    params = {
        name: v for name in POLICY_PARAMS[s.policy.kind] if (v := s.policy.get(name)) is not None
    }
    node = model.node(s.producer.node)
    port = node.output(s.producer.port) if node else None
    spec = type_spec(port.type) if port else None
    shape = spec.dims if spec is not None and spec.is_static else None
    return StreamBuffer(
        Policy.of(s.policy.kind.value, params),
        s.final.value,
        s.after_done_continue,
        capacity=capacity,
        item_shape=shape,  # type: ignore[arg-type]
        dtype=DTYPES[spec.dtype] if spec is not None else None,
        name=s.name,
    )


def kv_pools(model: Model, kv: KvCacheSpec) -> KvPools:
    """One pool per kv-cache node of ``model`` (copies share their owner's), as lowering
    sizes them (`wgc.lower.kv.pool_spec`)."""
    specs = {}
    for n in model.nodes:
        if n.engine is EngineKind.KV_CACHE:
            copy = owner_of(model, n) != n.name
            specs[n.name] = pool_spec(model, n, kv, 1, shared=copy)
    return KvPools(specs, attention="torch")


@dataclass
class _Task:
    name: str
    gen: Steps
    wait: Wait | None = None
    finished: bool = False


class Interpreter:
    """The state of one request."""

    def __init__(
        self,
        model: Model,
        request: SimpleRequest,
        nodes: Mapping[str, Node],
        placed: frozenset[str],
        request_id: str,
        stream_capacity: int | None = None,
        kv_pages: int = 512,
        kv_dtype: str = "f32",
    ):
        self.model = model
        self.request = request
        self.nodes = nodes
        self.placed = placed
        self.request_id = request_id
        self.options = {**request.defaults, **request.options}
        self.node_state: dict[str, dict] = {n.name: {} for n in model.nodes}
        self.kv = kv_pools(model, KvCacheSpec(pages=kv_pages, dtype=kv_dtype))
        self.streams = {s.name: stream_buffer(s, model, stream_capacity) for s in model.streams}
        self.stores: dict[str, dict] = {f.name: {} for f in model.flows}
        self.plans = {w.name: WalkPlan.of(w) for w in model.walks}
        self.outputs = Outputs()
        self.running: set[str] = set()
        self._flow_walks = {f.name: walks_of(f, list(self.plans)) for f in model.flows}

    # ------------------------------------------------------------------ services for walks
    def wait(self, ready, what: str) -> Steps:
        while not ready():
            yield Wait(ready, what)

    def cond(self, c) -> bool:
        return eval_cond(c, self.request, self.placed, self.model.param_values())

    def run_walk(self, flow: str, walk: str, args: dict[str, Any]) -> Steps:
        plan = self.plans.get(walk)
        if plan is None:
            raise RequestFailed(RequestError("flow", f"unknown walk `{walk}`", flow))
        yield from WalkRun(self, self.model, plan, flow, args).run()

    def emit(self, run: WalkRun, stmt, value, iteration: tuple[int, ...]) -> None:
        self.outputs.emitted.append(
            Emitted(run.flow, run.walk.name, stmt.modality, stmt.channel, value, iteration)
        )

    def persist(self, run: WalkRun, channel: str, value) -> None:
        self.stores[run.flow][channel] = value

    def call_node(self, run: WalkRun, c: Call, inputs: dict, iteration: tuple[int, ...]) -> Steps:
        decl = self.model.node(c.node)
        impl = self.nodes.get(c.node)
        if decl is None or impl is None:
            raise run.fail(f"node `{c.node}` is not loaded", "node", c.node)
        chunks = {}
        for p in decl.inputs:
            for s in self.model.streams_into(c.node, p.name):
                buf = self.streams[s.name]
                if buf.ended:
                    raise run.fail(
                        f"`{c.node}` in walk `{run.walk.name}` needs a chunk of stream "
                        f"`{s.name}`, which already delivered its final chunk",
                        "stream",
                        c.node,
                    )
                yield from self.wait(
                    buf.ready,
                    f"flow `{run.flow}`: `{c.node}` in walk `{run.walk.name}` waits for a chunk "
                    f"of stream `{s.name}`",
                )
                chunk = buf.take()
                assert chunk is not None  # `ready()` said a chunk can be taken
                inputs[p.name], chunks[p.name] = chunk.data, chunk.info
        ctx = CallContext(
            request_id=self.request_id,
            walk=run.walk.name,
            call=c.id,
            node=c.node,
            flow=run.flow,
            loops=c.loops,
            iteration=iteration,
            options=self.options,
            state=self.node_state[c.node],
            chunks=chunks,
            reads=frozenset(inputs),
            writes=frozenset(b.port for b in c.writes),
            kv=self.kv.handle(c.node, self.request_id) if self.kv.has(c.node) else None,
        )
        outputs = self._forward(run, c, impl, inputs, ctx, decl)
        for p in decl.outputs:
            if p.name not in outputs:
                continue
            for s in self.model.streams_from(c.node, p.name):
                buf = self.streams[s.name]
                yield from self.wait(
                    buf.can_push,
                    f"flow `{run.flow}`: `{c.node}` in walk `{run.walk.name}` waits for room "
                    f"in stream `{s.name}`",
                )
                try:
                    buf.push(outputs[p.name])
                except StreamError as exc:
                    raise run.fail(str(exc), "stream", c.node) from exc
        return outputs

    def _forward(self, run, c: Call, impl: Node, inputs, ctx, decl: NodeDecl) -> dict:
        try:
            outputs = impl.forward([Work(inputs, ctx)])[0]
        except Exception as exc:
            raise run.fail(
                f"node `{c.node}` failed in walk `{run.walk.name}`: {type(exc).__name__}: {exc}",
                "node",
                c.node,
            ) from exc
        types = {p.name: type_spec(p.type) for p in decl.outputs}
        try:
            check_outputs(c.node, types, outputs, required=ctx.writes)
        except NodeError as exc:
            raise run.fail(f"{exc} (in walk `{run.walk.name}`)", "output", c.node) from exc
        return dict(outputs)

    # ------------------------------------------------------------------ scheduling
    def _flows_calling(self, node: str) -> set[str]:
        return {
            f
            for f, walks in self._flow_walks.items()
            if any(c.node == node for w in walks for c in self.plans[w].walk.calls)
        }

    def _update_streams(self) -> None:
        for s in self.model.streams:
            buf = self.streams[s.name]
            if not buf.is_done and not (self._flows_calling(s.producer.node) & self.running):
                buf.done()
            consumers = self._flows_calling(s.consumer.node)
            consumers |= {f.name for f in self.model.flows if f.on_stream == s.name}
            if not buf.abandoned and not (consumers & self.running):
                buf.abandon()

    def active_flows(self) -> list:
        out = []
        for f in self.model.flows:
            if f.kind is FlowKind.WHEN and (f.when is None or not self.cond(f.when)):
                continue
            out.append(f)
        return out

    def run(self) -> Outputs:
        flows = self.active_flows()
        self.running = {f.name for f in flows}
        tasks = [_Task(f.name, FlowRun(self, f).run()) for f in flows]
        try:
            self._update_streams()
            self._schedule(tasks)
        except RequestFailed as exc:
            self.outputs.error = exc.error
        finally:
            for t in tasks:
                t.gen.close()
            for name, impl in self.nodes.items():
                impl.release(self.request_id)
                self.node_state.get(name, {}).clear()
            self.kv.free(self.request_id)
        return self.outputs

    def _schedule(self, tasks: list[_Task]) -> None:
        while not all(t.finished for t in tasks):
            progressed = False
            for t in tasks:
                while not t.finished and (t.wait is None or t.wait.ready()):
                    progressed = True
                    try:
                        t.wait = t.gen.send(None)
                    except StopIteration:
                        t.finished = True
                        self.running.discard(t.name)
                        self._update_streams()
            if not progressed:
                waits = "; ".join(t.wait.what for t in tasks if not t.finished and t.wait)
                raise RequestFailed(RequestError("deadlock", f"deadlock: {waits}"))


def run_request(
    model: Model,
    request: SimpleRequest,
    nodes: Mapping[str, Node] | None = None,
    placed: set[str] | frozenset[str] | None = None,
    request_id: str = "request-0",
    stream_capacity: int | None = None,
    kv_dtype: str = "f32",
) -> Outputs:
    """Run one request on the reference interpreter.

    ``nodes`` maps node names to instances (the rest are loaded from their `impl`); ``placed``
    is what `placed(NODE)` sees (default: every node); ``kv_dtype`` is the KV caches' dtype (the
    placement's ``kv_cache.dtype``, for equality with a run of it). A failure is returned in
    `Outputs.error`, never raised.
    """
    given = dict(nodes or {})
    missing = {n.name for n in model.nodes} - set(given)
    try:
        given.update(load_nodes(model, missing))
    except Exception as exc:
        return Outputs(error=RequestError("node", f"cannot load nodes: {exc}"))
    placed_set = frozenset(placed if placed is not None else (n.name for n in model.nodes))
    return Interpreter(
        model, request, given, placed_set, request_id, stream_capacity, kv_dtype=kv_dtype
    ).run()
