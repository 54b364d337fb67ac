"""One conductor and one worker per rank in ONE thread, through in-memory queues.

`LocalCluster` runs a compiled plan with the real execution cores (`ConductorCore`,
`RankExecutor`) and no processes: messages go through one FIFO queue, tensors by reference.
It is deterministic (drain every queued message, then let each rank run one batch, in rank
order, and repeat), so tests compare it exactly with the reference interpreter. When nothing is
queued, no rank has work and requests are still running, they can never progress: they end with
a ``deadlock`` error naming what each flow waits for (never a hang). `submit` checks a request at
the door first, like the conductor process (`wgc_runtime.host.admission`): a refused request's
handle is done at once with a ``rejected`` error listing every problem.

    cluster = LocalCluster("generated/mymodel/cpu-3rank")
    handle = cluster.submit(cluster.request([Segment("text", "a cat")], outputs=["image"]))
    for modality, channel, tensor, meta in handle:
        ...
    assert handle.ok, handle.error
"""

from __future__ import annotations

import itertools
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from msgspec.structs import replace

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import Request, Segment, SimpleRequest
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.contract.messages import CLIENT, CONDUCTOR, Finished, Message, Output
from wgc_runtime.contract.node import Node
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.core.conductor import ConductorCore
from wgc_runtime.core.conductor.door import describe
from wgc_runtime.core.executor import RankExecutor
from wgc_runtime.host.admission import RequestIds, admit
from wgc_runtime.host.loading import DeploymentError, load_nodes, load_plan, resolve_device

NodesFactory = Callable[[RankSpec], Mapping[str, Node]]


def _build(factory: NodesFactory, rank: RankSpec) -> Mapping[str, Node]:
    """``factory(rank)``; a node that cannot be built (a checkpoint that does not fit, a device
    the machine lacks, an impl that does not import) is a `DeploymentError` naming the rank,
    as a worker process reports it (`wgc run --local` exits 1 on it, like `wgc run`)."""
    try:
        return factory(rank)
    except DeploymentError as exc:
        raise DeploymentError(f"rank {rank.rank} failed to start: {exc}") from exc
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(exc)).strip()
        raise DeploymentError(f"rank {rank.rank} failed to start: {detail}") from exc


class OutputItem(NamedTuple):
    modality: str
    channel: str
    tensor: Any
    meta: dict[str, Any]  # flow, walk, iters


@dataclass
class Handle:
    """One submitted request: iterate it for its outputs as they stream; then `ok` / `error`."""

    cluster: LocalCluster
    id: str
    outputs: list[OutputItem] = field(default_factory=list)
    finished: Finished | None = None

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def ok(self) -> bool:
        return self.finished is not None and self.finished.ok

    @property
    def error(self) -> Finished | None:
        return None if self.finished is None or self.finished.ok else self.finished

    def __iter__(self) -> Iterator[OutputItem]:
        i = 0
        while True:
            while i < len(self.outputs):
                yield self.outputs[i]
                i += 1
            if self.done:
                return
            if not self.cluster.step():
                self.cluster.settle()

    def result(self) -> Handle:
        """Run until the request ends; returns itself."""
        for _ in self:
            pass
        return self

    def cancel(self) -> None:
        self.cluster.cancel(self.id)


class LocalCluster:
    """A conductor and its ranks in one thread (see the module docstring).

    ``source``: a generated folder (loaded with its spec version checked), or ``(ConductorSpec,
    [RankSpec, ...])``. ``nodes_factory`` builds each rank's nodes (default: import every
    `NodeSpec.impl`). ``max_batch`` defaults to each rank's ``batching.max_batch``.
    ``strict``: the door's strict checks (undeclared options, unknown wants; see
    `wgc_runtime.core.conductor.door`). ``conductor_options`` go to `ConductorCore` (timeouts,
    ``max_concurrent_requests``). ``direct`` False: plain pieces run in the generic executor
    too, not as their generated code (`wgc_runtime.core.executor.direct`). ``direct_out``
    (default off: the cores see the ids the requests were submitted with): the ranks hand a
    request's outputs to the client themselves, as worker processes send them to a connected
    client (`wgc_runtime.contract.route`), not through the conductor (never for a plan
    that may replay requests, whose outputs the conductor checks).
    """

    def __init__(
        self,
        source: str | Path | tuple[ConductorSpec, Sequence[RankSpec]],
        nodes_factory: NodesFactory | None = None,
        max_batch: int | None = None,
        strict: bool = False,
        direct: bool = True,
        direct_out: bool = False,
        **conductor_options: Any,
    ) -> None:
        if isinstance(source, tuple):
            self.spec, ranks = source[0], list(source[1])
        else:
            self.spec, ranks = load_plan(source)
        factory = nodes_factory or load_nodes
        self.queue: deque[tuple[int, Message]] = deque()
        self.conductor = ConductorCore(self.spec, self._send, **conductor_options)
        self.ranks = {
            r.rank: RankExecutor(
                r,
                _build(factory, r),
                self._send,
                max_batch=max_batch if max_batch is not None else r.batching.max_batch,
                device=resolve_device(r.device),
                direct=direct,
            )
            for r in ranks
        }
        for ex in self.ranks.values():
            ex.prepare_captures()
        self.strict = strict
        self.direct_out = direct_out and not self.conductor.may_replay
        self.handles: dict[str, Handle] = {}  # by the id the cores see
        self.ids = RequestIds()
        self._ids = itertools.count()
        self.log: list[tuple[int, Message]] | None = None  # set to a list to record traffic

    # ------------------------------------------------------------------ client API
    def request(
        self,
        segments: Sequence[Segment],
        outputs: Sequence[str] = (),
        options: Mapping[str, Any] | None = None,
    ) -> SimpleRequest:
        return self.spec.request(segments, outputs, options)

    def submit(
        self,
        request: Request,
        request_id: str | None = None,
        *,
        seed: int | None = None,
        session: str | None = None,
    ) -> Handle:
        """Run ``request`` (checked at the door first); ``seed``: what its nodes seed from
        (default: its id); ``session``: the session whose KV it continues (the placement's
        ``sessions:``). An id may be reused once its request ended."""
        rid = request_id if request_id is not None else f"request-{next(self._ids)}"
        if self.ids.live(rid):
            raise ValueError(f"request `{rid}` is already running")
        h = Handle(self, rid)
        request, problems = admit(
            self.spec, request, strict=self.strict, seed=seed, session=session
        )
        if problems:
            h.finished = Finished(rid, False, FailKind.REJECTED, describe(problems))
            return h
        n = next(self._ids)
        internal = self.ids.open(rid, (n, "local") if self.direct_out else None)
        self.handles[internal] = h
        self.conductor.submit(internal, self.ids.seeded(request, internal))
        return h

    def cancel(self, request_id: str) -> None:
        internal = self.ids.internal(request_id)
        if internal is not None:
            self.conductor.cancel(internal)

    def run(self) -> None:
        """Run until every submitted request ended."""
        while not all(h.done for h in self.handles.values()):
            if not self.step():
                self.settle()

    # ------------------------------------------------------------------ the loop
    def step(self) -> bool:
        """Deliver every queued message, then one batch per rank; False when nothing moved."""
        moved = self._drain()
        for ex in self.ranks.values():
            if ex.step():
                moved = True
                self._drain()
        for ex in self.ranks.values():
            ex.end_turn()  # the turn's stream credits back, one ack per producer
        moved = moved or bool(self.queue)
        if not moved:  # nothing to run: the nodes' work ahead (`RankExecutor.idle`)
            moved = any(ex.idle() for ex in self.ranks.values())
        self.conductor.tick()
        return moved

    def settle(self) -> None:
        """Nothing moved: every running request is stuck for good; end them with an error."""
        if self.conductor.busy():
            self.conductor.fail_stalled()
            self._drain()

    def _drain(self) -> bool:
        moved = False
        while self.queue:
            to, msg = self.queue.popleft()
            moved = True
            if to == CONDUCTOR:
                self.conductor.deliver(msg)
            elif to == CLIENT:
                self._to_client(msg)
            else:
                self.ranks[to].deliver(msg)
        return moved

    def _send(self, to: int, msg: Message) -> None:
        if self.log is not None:
            self.log.append((to, msg))
        self.queue.append((to, msg))

    def _to_client(self, msg: Message) -> None:
        h = self.handles.get(getattr(msg, "request", ""))
        if h is None:
            return
        if isinstance(msg, Output):
            meta = {"flow": msg.flow, "walk": msg.walk, "iters": msg.iters}
            h.outputs.append(OutputItem(msg.modality, msg.channel, msg.data, meta))
        elif isinstance(msg, Finished):
            self.ids.close(msg.request)
            h.finished = msg if msg.request == h.id else replace(msg, request=h.id)
