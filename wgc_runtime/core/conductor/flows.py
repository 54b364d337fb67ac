"""Flows: each request's flows side by side, and the streams they produce and consume.

A request runs every ``always`` flow, every ``when`` flow whose condition holds, every
``extern`` flow (``module:function``, imported), and every ``on_stream`` flow, which runs its
body once per chunk of its stream: the stream's owner rank says when chunk j is ready
(`ChunkReady`, with its exact ``final`` flag); an *empty* chunk is skipped (`SkipChunk`), a
non-empty one runs the body, then `SkipChunk` drops the chunk unless the body's walk took it; the
flow ends after the final chunk. A stream with a standing rule (`StreamSpec.chunk_walk`) sends
none of this: its owner rank runs the flow's one walk per chunk itself, and the flow ends on the
owner's one `ChunksDone`. A flow's `RunWalk` launches a walk (`walks`); its `Fail` ends
the request.

**Streams.** A stream's producer is done for the request once every flow in
`StreamSpec.done_after_flows` that runs has ended (`StreamDone` to the owner). It is abandoned
(`StreamAbandon`: items are accepted and dropped, the producer never stalls) once none of its
`StreamSpec.consumer_flows` runs.

`Flows` keeps the plan's streams and which flow runs for each stream's chunks; a request's flow
runs (`FlowRun`) and stream bookkeeping live in its `RequestRun`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract.conductor import ConductorSpec, FlowSpec
from wgc_runtime.contract.families import resolve_impl
from wgc_runtime.contract.flow import Fail, Request, RunWalk
from wgc_runtime.contract.kinds import FailKind, FlowKind
from wgc_runtime.contract.messages import (
    ChunkReady,
    ChunksDone,
    SkipChunk,
    StreamAbandon,
    StreamDone,
)
from wgc_runtime.core.conductor.state import Abort, FlowRun, RequestRun
from wgc_runtime.core.post import Post

if TYPE_CHECKING:
    from wgc_runtime.core.conductor.walks import Walks

End = Callable[[RequestRun, Abort | None], None]


def runs(f: FlowSpec, request: Request) -> bool:
    """Whether flow ``f`` runs for ``request`` (a ``when`` flow: its condition holds)."""
    if f.kind is not FlowKind.WHEN:
        return True
    try:
        return bool(f.when(request)) if f.when is not None else True
    except Exception as exc:
        raise Abort(FailKind.FLOW, f"flow `{f.name}`: condition raised {exc!r}", f.name) from exc


def generator(f: FlowSpec, request: Request) -> Generator[Any, Any, Any]:
    """The flow's body started for ``request`` (an ``extern`` flow: imported first)."""
    if f.kind is FlowKind.EXTERN:
        module, _, fn = resolve_impl(f.extern or "").partition(":")
        try:
            return getattr(importlib.import_module(module), fn)(request)
        except Exception as exc:
            raise Abort(
                FailKind.FLOW, f"flow `{f.name}`: cannot start `{f.extern}`: {exc}", f.name
            ) from exc
    if f.body is None:
        raise Abort(FailKind.FLOW, f"flow `{f.name}` has no body", f.name)
    return f.body(request)


class Flows:
    """Runs requests' flows (see the module docstring)."""

    walks: Walks
    end: End

    def __init__(self, spec: ConductorSpec, post: Post) -> None:
        self.spec = spec
        self.post = post
        self.on_stream = {f.stream: f.name for f in spec.flows if f.kind is FlowKind.ON_STREAM}
        self.owner = {s.name: s.owner for s in spec.streams}
        # flow -> its stream, for the flows whose chunks the owner runs (a standing rule)
        self.ruled = {s.chunk_flow: s.name for s in spec.streams if s.chunk_walk}

    def connect(self, walks: Walks, end: End) -> None:
        """Where a flow's `RunWalk` goes, and how a request ends."""
        self.walks, self.end = walks, end

    def start(self, req: RequestRun) -> None:
        """Start every flow of the request that runs."""
        for f in self.spec.flows:
            if runs(f, req.request):
                req.flows[f.name] = FlowRun(f)
        self.update_streams(req)
        for flow in list(req.flows.values()):
            if req.ended:
                return
            if flow.spec.name in self.ruled:
                flow.ruled = True  # its owner rank runs it (`on_chunks_done` ends it)
            elif flow.spec.kind is FlowKind.ON_STREAM:
                self.pump(req, flow)
            else:
                flow.gen = generator(flow.spec, req.request)
                self.resume(req, flow)
        self.maybe_done(req)

    def resume(self, req: RequestRun, flow: FlowRun) -> None:
        """Run ``flow`` until it waits for a walk or ends."""
        while not req.ended:
            try:
                step = next(flow.gen)
            except StopIteration:
                self.body_ended(req, flow)
                return
            except Abort:
                raise
            except Exception as exc:
                raise Abort(
                    FailKind.FLOW, f"flow `{flow.spec.name}` raised: {exc}", flow.spec.name
                ) from exc
            if isinstance(step, Fail):
                raise Abort(FailKind.FAIL, step.message, flow.spec.name)
            if not isinstance(step, RunWalk):
                raise Abort(
                    FailKind.FLOW, f"flow `{flow.spec.name}` yielded {step!r}", flow.spec.name
                )
            self.walks.launch(req, flow, step)
            return

    def body_ended(self, req: RequestRun, flow: FlowRun) -> None:
        flow.gen = None
        if flow.spec.kind is FlowKind.ON_STREAM and flow.current is not None:
            chunk, flow.current = flow.current, None
            self.send_skip(req, chunk)
            if chunk.final:
                self.flow_ended(req, flow)
            else:
                flow.index += 1
                self.pump(req, flow)
            return
        self.flow_ended(req, flow)

    def flow_ended(self, req: RequestRun, flow: FlowRun) -> None:
        flow.done = True
        self.update_streams(req)
        self.maybe_done(req)

    def on_chunk(self, req: RequestRun, msg: ChunkReady) -> None:
        """A chunk of a stream is ready on its owner: the stream's flow may run for it."""
        flow_name = self.on_stream.get(msg.stream)
        flow = req.flows.get(flow_name) if flow_name else None
        if flow is not None and not flow.done:
            flow.chunks[msg.index] = msg
            self.pump(req, flow)

    def on_chunks_done(self, req: RequestRun, msg: ChunksDone) -> None:
        """The owner ran a stream's standing rule through its final chunk: its flow ended."""
        flow = req.flows.get(next((f for f, s in self.ruled.items() if s == msg.stream), ""))
        if flow is not None and flow.ruled and not flow.done:
            self.flow_ended(req, flow)

    def pump(self, req: RequestRun, flow: FlowRun) -> None:
        """Run an ``on_stream`` flow's body for every ready chunk, in order."""
        while not req.ended and not flow.done and flow.current is None:
            chunk = flow.chunks.pop(flow.index, None)
            if chunk is None:
                return
            if chunk.empty:  # nothing to process; an empty final chunk only ends the flow
                self.send_skip(req, chunk)
                if chunk.final:
                    self.flow_ended(req, flow)
                    return
                flow.index += 1
                continue
            flow.current = chunk
            flow.gen = generator(flow.spec, req.request)
            self.resume(req, flow)

    def send_skip(self, req: RequestRun, chunk: ChunkReady) -> None:
        owner = self.owner.get(chunk.stream)
        if owner is not None:
            self.post.send(owner, SkipChunk(req.id, chunk.stream, chunk.index))

    def maybe_done(self, req: RequestRun) -> None:
        if not req.ended and all(f.done for f in req.flows.values()):
            self.end(req, None)

    def update_streams(self, req: RequestRun) -> None:
        running = {n for n, f in req.flows.items() if not f.done}
        for s in self.spec.streams:
            if s.name not in req.streams_done and not (set(s.done_after_flows) & running):
                req.streams_done.add(s.name)
                self.post.send(s.owner, StreamDone(req.id, s.name))
            if s.name in req.streams_abandoned:
                continue
            if not (set(s.consumer_flows) & running):
                req.streams_abandoned.add(s.name)
                self.post.send(s.owner, StreamAbandon(req.id, s.name))
