"""What every entry point does to a request before a `ConductorCore` sees it.

The conductor process (`processes.conductor_main`), `LocalCluster` and the HTTP server
(`server`) share it, so they refuse and run the same requests:

* `admit` checks the request against the deployment's input limits (`within`: segment count,
  text length, array size; a request over one is refused before it is dry run), then at the
  door (`wgc_runtime.core.conductor.door`: every problem, or none), and gives it its
  **seed**: a request may name one (``wgc run --seed``, ``"seed"`` over HTTP); it travels as
  the option `SEED_OPTION`, which `CallContext.seed` reads in place of the request id, so two
  requests with one seed compute the same; and its **session** (``"session"`` over HTTP), which
  travels as the option `SESSION_OPTION` (`session_problems` says which ids a deployment takes).
* `RequestIds` lets a client **reuse the id of an ended request**. The ranks remember ended ids
  for a while (to drop late messages), so a reused id would be ignored there; the cores and the
  ranks see a fresh internal id instead (``<id>~<n>``), whose seed stays the client's id. The
  first use of an id runs under the id itself, so nodes and logs see what the client sent.
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import SEED_OPTION, SESSION_OPTION, Request, SimpleRequest
from wgc_runtime.contract.route import ROUTE_SEP, routed_id
from wgc_runtime.core.conductor.door import Problem, check
from wgc_runtime.host.inputs import InputError, Limits, check_segments, check_value

_I64 = 2**63
SESSION_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def admit(
    spec: ConductorSpec,
    request: Request,
    *,
    strict: bool,
    seed: Any = None,
    limits: Limits | None = None,
    session: Any = None,
) -> tuple[Request, list[Problem]]:
    """``request`` checked at the door, with its seed set when it has one: (the request to
    run, its problems). ``limits``: the deployment's input limits, checked first (segment
    count, each text and array), so a request over them is never dry run."""
    over = within(request, limits or Limits())
    if over:
        return request, over
    problems = check(spec, request, strict=strict)
    if seed is not None and (
        not isinstance(seed, int) or isinstance(seed, bool) or not -_I64 <= seed < _I64
    ):
        problems.append(Problem("seed", f"a seed is a 64-bit integer, got `{seed!r}`"))
    if session is not None:
        problems += session_problems(spec, session)
    if seed is not None and not problems:
        request = with_seed(request, seed)
    if session is not None and not problems:
        request = with_option(request, SESSION_OPTION, session)
    return request, problems


def session_problems(spec: ConductorSpec, session: Any) -> list[Problem]:
    """Why ``session`` cannot name a session of this deployment (none when it can)."""
    if not isinstance(session, str) or not SESSION_ID.fullmatch(session):
        return [
            Problem(
                "session",
                f"a session id is 1 to 128 letters, digits, `.`, `_` or `-`, got `{session!r}`",
            )
        ]
    if any(w.handoffs for w in spec.walks):
        return [
            Problem(
                "session",
                f"placement `{spec.placement}` moves a kv-cache node's state between rank groups "
                "(prefill and decode apart); sessions keep it on one group only: place the node's "
                "walks on one group",
            )
        ]
    if spec.kv_cache.max_sessions <= 0:
        return [
            Problem(
                "session",
                f"placement `{spec.placement}` keeps no sessions: set `sessions: {{max_sessions:"
                " N}}` in it",
            )
        ]
    return []


def within(request: Request, limits: Limits) -> list[Problem]:
    """The first input of ``request`` over ``limits`` (`wgc_runtime.host.inputs`), as a
    problem: its segment count, then each segment's data and fields."""
    try:
        check_segments(len(request.inputs), "inputs", limits)
        for i, seg in enumerate(request.inputs):
            check_value(seg.data, f"inputs[{i}].data", limits)
            for k, v in seg.fields:
                check_value(v, f"inputs[{i}].fields.{k}", limits)
    except InputError as exc:
        where, _, why = str(exc).partition(": ")
        return [Problem(where, why)]
    return []


def with_seed(request: Request, seed: Any) -> Request:
    """``request`` whose nodes seed from ``seed`` (a `SimpleRequest`; others are kept)."""
    return with_option(request, SEED_OPTION, seed)


def with_option(request: Request, name: str, value: Any) -> Request:
    """``request`` with the runtime's option ``name`` set (a `SimpleRequest`; others are
    kept)."""
    if not isinstance(request, SimpleRequest):
        return request
    options: Mapping[str, Any] = {**request.options, name: value}
    return replace(request, options=options)


class RequestIds:
    """Client request ids and the ids the cores and ranks see (see the module docstring).

    ``keep``: how many ids it remembers as used; the ranks forget ended ids sooner (4096), so
    an id used longer ago than that runs under itself again, safely."""

    def __init__(self, keep: int = 65_536) -> None:
        self.keep = keep
        self._used: OrderedDict[str, None] = OrderedDict()
        self._live: dict[str, str] = {}  # client id -> internal id
        self._client: dict[str, str] = {}  # internal id -> client id
        self._n = itertools.count(1)

    def live(self, rid: str) -> bool:
        return rid in self._live

    def open(self, rid: str, route: tuple[int, str] | None = None) -> str:
        """The internal id of a new request ``rid`` (not live); ``route``: (the client's number
        of the request, the client's identity) when its outputs go to the client directly
        (`contract.route`). An unrouted id never looks routed."""
        internal = rid if rid not in self._used else f"{rid}~{next(self._n)}"
        if route is not None:
            internal = routed_id(internal, *route)
        elif ROUTE_SEP in internal:
            internal = f"{internal.replace(ROUTE_SEP, '?')}~{next(self._n)}"
        self._used[rid] = None
        self._used.move_to_end(rid)
        while len(self._used) > self.keep:
            self._used.popitem(last=False)
        self._live[rid] = internal
        self._client[internal] = rid
        return internal

    def internal(self, rid: str) -> str | None:
        """The internal id of live request ``rid``."""
        return self._live.get(rid)

    def client(self, internal: str) -> str:
        return self._client.get(internal, internal)

    def successor(self, internal: str) -> str:
        """A fresh internal id for the client of ``internal`` (a replay runs under it: the
        ranks drop what still arrives for the old one)."""
        return f"{self.client(internal)}~{next(self._n)}"

    def move(self, internal: str, new: str) -> None:
        """The client of ``internal`` is served by ``new`` from now on."""
        rid = self._client.pop(internal, internal)
        self._live[rid] = new
        self._client[new] = rid

    def close(self, internal: str) -> None:
        rid = self._client.pop(internal, None)
        if rid is not None and self._live.get(rid) == internal:
            del self._live[rid]

    def seeded(self, request: Request, internal: str) -> Request:
        """``request`` seeded as its client id when it runs under another id (and has no seed
        of its own)."""
        rid = self.client(internal)
        if rid == internal or not isinstance(request, SimpleRequest):
            return request
        if SEED_OPTION in request.options:
            return request
        return with_seed(request, rid)
