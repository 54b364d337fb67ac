"""Replaying a request after a restart: it runs again from its start, under a new id.

A worker restart (`wgc_runtime.host.processes.recovery`) loses the dead rank's state of every
request it held. For a walk whose plan says ``on_restart: replay`` (`WalkSpec.on_restart`), the
host asks `replay` to run such a request again rather than fail it: the old run ends on every
rank (`Release`, reason ``replayed``: a value of it still in transit is dropped there, since the
ranks forget an ended id only after thousands of others) and the request goes to the head of
the queue under ``new_id``, its queue deadline counted from now, to start once admission is open
again (the host holds it while the rank is down). The request is the same; one that names no
seed is seeded with its old id, which its nodes' seeds derived from (`CallContext.seed`), so the
replay computes what the lost run would have.

It cannot replay a request some of whose outputs already reached the client (they would reach
it twice) or one that runs in a session (its kept state is the session's, across requests):
`replay` then says why, and the host fails it as it would without the policy.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING

from wgc_runtime.contract.flow import SEED_OPTION, SESSION_OPTION, SimpleRequest
from wgc_runtime.contract.messages import Release

if TYPE_CHECKING:
    from wgc_runtime.core.conductor.core import ConductorCore

REPLAYED = "replayed"  # `Release.reason` of a run that is replayed


def replay(self: ConductorCore, request_id: str, new_id: str) -> str | None:
    """Run ``request_id`` again from its start as ``new_id`` (see the module docstring); None
    when it will, else why it cannot (the request is left as it was)."""
    req = self.active.get(request_id)
    if req is None or req.ended:
        return "it is not running"
    if req.emitted:
        return "some of its outputs reached the client already (a replay would send them twice)"
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
    self.queue[new_id] = (request, self.clock() + self.queue_timeout_s)
    self.queue.move_to_end(new_id, last=False)
    return None  # the core admits the queue next (`ConductorCore.replay`)
