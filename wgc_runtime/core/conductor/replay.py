"""Replaying a request after a restart: it runs again from its start, under a new id.

A worker restart (`wgc_runtime.host.processes.recovery`) loses the dead rank's state of every
request it held. For a piece whose plan says ``on_restart: replay`` (`WalkSpec.restart_on`), the
host asks `replay` to run such a request again rather than fail it: the old run ends on every
rank (`Release`, reason ``replayed``: a value of it still in transit is dropped there, since the
ranks forget an ended id only after thousands of others) and the request goes to the head of
the queue under ``new_id``, its queue deadline counted from now, to start once admission is open
again (the host holds it while the rank is down). The request is the same; one that names no
seed is seeded with its old id, which its nodes' seeds derived from (`CallContext.seed`), so the
replay computes what the lost run would have.

**Outputs the client already has.** In a plan where some piece replays, the conductor keeps a
digest of every output it sends a request's client (`Delivered`: per emit, its flow, walk,
channel and loop iterations, in order). A replay inherits them: each output of the new run that
the client already has is checked against its digest and not sent again (`guard_output`); the
first that differs fails the request (the replay diverged: the client would get a stream mixed
from two runs), and so does a replay that ends without producing one the client already has
(`unreplayed`). So the client receives exactly the uninterrupted run's outputs, once each.

It cannot replay a request that runs in a session (its kept state is the session's, across
requests): `replay` then says why, and the host fails it as it would without the policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import pickle
from collections import deque
from typing import TYPE_CHECKING, Any, cast

from wgc_runtime.contract.flow import SEED_OPTION, SESSION_OPTION, SimpleRequest
from wgc_runtime.contract.kinds import FailKind, OnRestart
from wgc_runtime.contract.messages import ClientOut, Release
from wgc_runtime.core.conductor.state import Abort

if TYPE_CHECKING:
    from wgc_runtime.contract.conductor import ConductorSpec
    from wgc_runtime.core.conductor.core import ConductorCore
    from wgc_runtime.core.conductor.state import RequestRun

REPLAYED = "replayed"  # `Release.reason` of a run that is replayed

# an emit of a request: (flow, walk, channel, loop iterations)
OutputKey = tuple[str, str, str, tuple[int, ...]]
# what the client has of a request: per emit, the digests of its outputs in the order sent
Delivered = dict[OutputKey, deque[bytes]]


def may_replay(spec: ConductorSpec) -> bool:
    """Whether some piece of the plan replays (then outputs are remembered, `Delivered`)."""
    return any(w.restart_on(r) is OnRestart.REPLAY for w in spec.walks for r in (*w.ranks, -1))


def replay(self: ConductorCore, request_id: str, new_id: str) -> str | None:
    """Run ``request_id`` again from its start as ``new_id`` (see the module docstring); None
    when it will, else why it cannot (the request is left as it was)."""
    req = self.active.get(request_id)
    if req is None or req.ended:
        return "it is not running"
    if req.delivered is None and req.sent:
        return "some of its outputs reached the client already, unrecorded"
    request = req.request
    if isinstance(request, SimpleRequest):
        if request.option_values().get(SESSION_OPTION):
            return "it runs in a session, whose kept state a replay cannot restore"
        if SEED_OPTION not in request.options:
            request = dataclasses.replace(
                request, options={**request.options, SEED_OPTION: request_id}
            )
    if new_id in self.active or new_id in self.queue:
        raise ValueError(f"request `{new_id}` is already running")
    req.ended = True
    for f in req.flows.values():
        if f.gen is not None:
            with contextlib.suppress(Exception):  # closing must not stop the replay
                f.gen.close()
    self.active.pop(request_id, None)
    self.admission.promise(-1)
    for r in range(self.spec.world_size):
        self.post.send(r, Release(request_id, REPLAYED))
    if req.delivered:
        self.replayed[new_id] = req.delivered
    self.queue[new_id] = (request, self.clock() + self.queue_timeout_s)
    self.queue.move_to_end(new_id, last=False)
    return None  # the core admits the queue next (`ConductorCore.replay`)


def inherit(self: ConductorCore, req: RequestRun) -> None:
    """A starting run: what its client already has, when it replays a lost run."""
    if not self.may_replay:
        return
    had = self.replayed.pop(req.id, None)
    req.delivered = {k: deque(v) for k, v in had.items()} if had else {}
    req.expected = {k: deque(v) for k, v in had.items()} if had else {}


def guard_output(req: RequestRun, msg: ClientOut) -> bool:
    """Whether ``msg`` goes to the client: not when it already has it (checked equal, else the
    replay diverged: `Abort`)."""
    req.sent += 1
    if req.delivered is None:
        return True
    key: OutputKey = (msg.flow, msg.walk, msg.channel, tuple(msg.iters))
    value = digest(msg.data)
    waiting = req.expected.get(key)
    if waiting:
        if waiting.popleft() != value:
            raise Abort(
                FailKind.INTERNAL,
                f"its replay after a restart diverged from what the client already received "
                f"(`{msg.walk}` emitted a different `{msg.channel}` at iteration "
                f"{list(msg.iters)}); it cannot go on without sending a mixed stream",
                msg.flow,
                msg.walk,
            )
        return False
    req.delivered.setdefault(key, deque()).append(value)
    return True


def unreplayed(req: RequestRun) -> Abort | None:
    """A replay that finished without an output the client already has: it diverged."""
    left = sum(len(v) for v in (req.expected or {}).values())
    if not left:
        return None
    return Abort(
        FailKind.INTERNAL,
        f"its replay after a restart ended without {left} output(s) the client already "
        "received from the lost run (it diverged)",
    )


def digest(data: Any) -> bytes:
    """A digest of an output's value: tensors by dtype, shape and bytes; other values by
    their pickle."""
    h = hashlib.blake2b(digest_size=16)
    _feed(h, data)
    return h.digest()


def _feed(h: Any, data: Any) -> None:
    if hasattr(data, "detach") and hasattr(data, "untyped_storage"):  # a torch tensor
        import torch  # already imported by whoever made the tensor

        t = data.detach().cpu().contiguous()
        h.update(f"tensor {t.dtype} {tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(data, (list, tuple)):
        kind = "list" if isinstance(data, list) else "tuple"
        items: list[Any] = list(cast("tuple[Any, ...]", data))
        h.update(f"{kind} {len(items)};".encode())
        for x in items:
            _feed(h, x)
    elif isinstance(data, dict):
        pairs: list[tuple[Any, Any]] = list(cast("dict[Any, Any]", data).items())
        h.update(f"dict {len(pairs)};".encode())
        for k, v in pairs:
            _feed(h, k)
            _feed(h, v)
    else:
        h.update(pickle.dumps(data, protocol=5))
