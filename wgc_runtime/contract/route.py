"""Which requests' outputs go from the producing rank straight to their client: the *route*
travels in the request id itself.

A client connected to every rank's client-out socket (`wgc_runtime.host.client`) asks for
direct outputs; the conductor then runs its request under an internal id that ends with the
route: ``<id>\\x1f<n>\\x1f<client identity>`` (`routed_id`; ``n``: the client's own number for the
request, unique per client, so a late output of an ended request never reaches a new request
that reuses the id). Every message of a request carries its id, so every rank that emits for it
knows where the output goes without any message or table of its own: no race between the
conductor's orders and a value from another rank that starts a piece, nothing left behind on a
rank that drops a request's bookkeeping itself. A rank sends such a request's emits to the client
as `Output` (``counted``) and tells the conductor only how many (`WalkDone.emits`,
`ChunksDone.emits`, `Emitted`); `Finished.outputs` says how many the client must have.

Nodes never see the route: their request id is the id before it (`base_id`), as unique.

An id without the separator runs as before: each emit goes to the conductor (`ClientOut`), which
passes it on (a plan that may replay a request after a restart, a traced request, a client that
did not connect to the ranks, and every request when ``WGC_DIRECT_OUT=0``: see
`wgc_runtime.host.transport.tuning`).
"""

from __future__ import annotations

ROUTE_SEP = "\x1f"


def routed_id(base: str, n: int, client: str) -> str:
    """The internal id of request ``base`` whose outputs go to ``client`` (its socket identity,
    printable, without `ROUTE_SEP`) directly; ``n``: the client's number of the request."""
    return f"{base}{ROUTE_SEP}{n}{ROUTE_SEP}{client}"


def base_id(request: str) -> str:
    """The request's id without its route: what its nodes see (`CallContext.request_id`,
    `Node.release`) and what messages to people say; unique among live requests as the
    routed id is (`wgc_runtime.host.admission.RequestIds`)."""
    return request if ROUTE_SEP not in request else request.split(ROUTE_SEP, 1)[0]


def route(request: str) -> tuple[bytes, int] | None:
    """(client identity, the client's number of the request) of a routed request id, else None."""
    if ROUTE_SEP not in request:
        return None
    _, n, client = request.rsplit(ROUTE_SEP, 2)
    try:
        return client.encode(), int(n)
    except ValueError:
        return None


def routable(client: bytes) -> bool:
    """Whether a socket identity can be a route (printable ASCII, no separator)."""
    try:
        text = client.decode("ascii")
    except UnicodeDecodeError:
        return False
    return bool(text) and text.isprintable() and ROUTE_SEP not in text
