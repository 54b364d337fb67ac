"""Flows: each request's flows side by side, and the streams they produce and consume.

A request runs every ``always`` flow, every ``when`` flow whose condition holds, every
``extern`` flow (``module:function``, imported), and every ``on_stream`` flow, which runs its
body once per chunk of its stream: the stream's owner rank says when chunk j is ready
(`ChunkReady`, with its exact ``final`` flag); an *empty* chunk is skipped (`SkipChunk`), a
non-empty one runs the body, then `SkipChunk` drops the chunk unless the body's walk took it; the
flow ends after the final chunk. A flow's `RunWalk` launches a walk (`walks`); its `Fail` ends
the request.

**Streams.** A stream's producer is done for the request once every flow in
`StreamSpec.done_after_flows` that runs has ended (`StreamDone` to the owner). It is abandoned
(`StreamAbandon`: items are accepted and dropped, the producer never stalls) once none of its
`StreamSpec.consumer_flows` runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from wgc_runtime.contract.conductor import FlowSpec
from wgc_runtime.contract.families import resolve_impl
from wgc_runtime.contract.flow import Fail, Request, RunWalk
from wgc_runtime.contract.kinds import FailKind, FlowKind
from wgc_runtime.contract.messages import (
    ChunkReady,
    SkipChunk,
    StreamAbandon,
    StreamDone,
)
from wgc_runtime.core.conductor.state import (
    Abort,
    FlowRun,
    RequestRun,
)

if TYPE_CHECKING:
    from wgc_runtime.core.conductor.core import ConductorCore


def _runs(f: FlowSpec, request: Request) -> bool:
    if f.kind is not FlowKind.WHEN:
        return True
    try:
        return bool(f.when(request)) if f.when is not None else True
    except Exception as exc:
        raise Abort(FailKind.FLOW, f"flow `{f.name}`: condition raised {exc!r}", f.name) from exc


def _generator(f: FlowSpec, request: Request):
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


def _resume(self: ConductorCore, req: RequestRun, flow: FlowRun) -> None:
    """Run ``flow`` until it waits for a walk or ends."""
    while not req.ended:
        try:
            step = next(flow.gen)
        except StopIteration:
            self._flow_body_ended(req, flow)
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
            raise Abort(FailKind.FLOW, f"flow `{flow.spec.name}` yielded {step!r}", flow.spec.name)
        self._launch(req, flow, step)
        return


def _flow_body_ended(self: ConductorCore, req: RequestRun, flow: FlowRun) -> None:
    flow.gen = None
    if flow.spec.kind is FlowKind.ON_STREAM and flow.current is not None:
        chunk, flow.current = flow.current, None
        self._send_skip(req, chunk)
        if chunk.final:
            self._flow_ended(req, flow)
        else:
            flow.index += 1
            self._pump_stream_flow(req, flow)
        return
    self._flow_ended(req, flow)


def _flow_ended(self: ConductorCore, req: RequestRun, flow: FlowRun) -> None:
    flow.done = True
    self._update_streams(req)
    self._maybe_done(req)


def _pump_stream_flow(self: ConductorCore, req: RequestRun, flow: FlowRun) -> None:
    """Run an ``on_stream`` flow's body for every ready chunk, in order."""
    while not req.ended and not flow.done and flow.current is None:
        chunk = flow.chunks.pop(flow.index, None)
        if chunk is None:
            return
        if chunk.empty:  # nothing to process; an empty final chunk only ends the flow
            self._send_skip(req, chunk)
            if chunk.final:
                self._flow_ended(req, flow)
                return
            flow.index += 1
            continue
        flow.current = chunk
        flow.gen = self._generator(flow.spec, req.request)
        self._resume(req, flow)


def _send_skip(self: ConductorCore, req: RequestRun, chunk: ChunkReady) -> None:
    owner = self._stream_owner(chunk.stream)
    if owner is not None:
        self.outbox(owner, SkipChunk(req.id, chunk.stream, chunk.index))


def _stream_owner(self: ConductorCore, name: str) -> int | None:
    return next((s.owner for s in self.streams if s.name == name), None)


def _maybe_done(self: ConductorCore, req: RequestRun) -> None:
    if not req.ended and all(f.done for f in req.flows.values()):
        self._end(req, None)


def _update_streams(self: ConductorCore, req: RequestRun) -> None:
    running = {n for n, f in req.flows.items() if not f.done}
    for s in self.streams:
        if s.name not in req.streams_done and not (set(s.done_after_flows) & running):
            req.streams_done.add(s.name)
            self.outbox(s.owner, StreamDone(req.id, s.name))
        if s.name in req.streams_abandoned:
            continue
        if not (set(s.consumer_flows) & running):
            req.streams_abandoned.add(s.name)
            self.outbox(s.owner, StreamAbandon(req.id, s.name))
