"""The messages between the conductor and the workers (one per rank), and what the client sees.

Every message is a frozen `msgspec.Struct`, encoded as a msgpack array (``[tag, field, ...]``:
``array_like``, an int tag per class). The transport (`wgc_runtime.host.transport.codec`)
decodes a received frame *into these types*, so a malformed or mistyped message is rejected at
the socket with a `CodecError` naming the bad field: it never reaches a core, and nothing is ever
pickled. The launcher and client protocols (`wgc_runtime.contract.control`) are messages of the
same kind; `INBOX` is what a rank's or the conductor's inbox accepts.

**Tensors.** A *data message* (`Value`, `StreamItem`, `StatePart`, `ClientOut`, `Output`) carries
one value in its ``data`` field: in one process the tensor itself (or ``None``); across processes
the codec's encode hook turns the tensor into a msgpack extension value (inline bytes for a small
tensor, a shared-memory arena descriptor on one host, a zero-copy frame across hosts) and its
decode hook turns it back.

The messages live by direction: `orders` (conductor -> rank), `data` (rank -> rank), `reports`
(rank -> conductor, conductor -> client), on `base` (`Message`); import them from here.

Addresses: a rank is its number; `CONDUCTOR` and `CLIENT` are the other two endpoints. An
``outbox`` is a callable ``outbox(to: int, msg)``.

Identifiers: ``request`` is the client's request id (a str). ``walk_id`` numbers one *walk
instance* (one `RunWalk` of one flow); the conductor assigns it, unique per conductor. Loop
iterations are tagged as ``iters``: ``((loop, i), ...)`` for the producer's enclosing loops,
outermost first (see `Value`).

Who sends what:

======================  ==================  ==============================================
message                 from -> to          meaning
======================  ==================  ==============================================
`StartWalk`             conductor -> rank   run this rank's piece of a walk instance
`Value`                 any -> rank         a value for input ``port`` of call ``call``
`ForwardPersisted`      conductor -> rank   resolve a persisted channel and deliver it as a
                                            walk input to ``dests``
`Until`                 rank -> rank        the stop value of iteration i of a loop
`StreamItem`            rank -> owner rank  one produced stream item
`StreamAck`             owner -> rank       ``count`` items were accepted: credits back
`StreamAcks`            owner -> rank       the same for several requests of one stream
`StreamDone`            conductor -> owner  the stream's producer is done for the request
`StreamAbandon`         conductor -> owner  no consumer is left: accept and drop items
`ChunkReady`            owner -> conductor  chunk ``index`` of a stream can be taken
`ChunksDone`            owner -> conductor  the owner ran a stream's standing rule through
                                            its final chunk: the `on` flow is done
`SkipChunk`             conductor -> owner  an `on` flow is done with chunk ``index``: take
                                            and drop it unless a call already took it
`WalkDone`              rank -> conductor   this rank finished its piece of a walk instance
                                            (and sent ``emits`` outputs to the client)
`ClientOut`             rank -> conductor   an emitted value (a request without a route)
`Emitted`               rank -> conductor   ``count`` outputs went to the client directly
`Failed`                rank -> conductor   the request failed on this rank
`Release`               conductor -> rank   the request ended: drop all its state
`ExportState`           conductor -> rank   export the request's state of a node and send it
                                            to the node's new group (a plan handoff)
`CopyKv`                conductor -> rank   copy one KV label of a node's cache to the pool
                                            of its copy on another group (a plan copy)
`StatePart`             rank -> rank        one named tensor of an exported node state
`StateEnd`              rank -> rank        the exported state is complete (``parts`` parts)
`StateImported`         rank -> conductor   the state arrived and was imported here
`Output`                conductor -> client an emitted value, with its flow and walk; a
                        rank -> client      routed request's from the rank that made it
                                            (`route`: the route is in the request id)
`Finished`              conductor -> client the request ended (ok, or its error)
======================  ==================  ==============================================
"""

from __future__ import annotations

from wgc_runtime.contract.kinds import Cause, Edge, FailKind
from wgc_runtime.contract.messages.base import CLIENT, CONDUCTOR, Iters, Message
from wgc_runtime.contract.messages.data import (
    StateEnd,
    StatePart,
    StreamAck,
    StreamAcks,
    StreamItem,
    StreamItems,
    Until,
    Value,
    pack_items,
    unpack_acks,
    unpack_items,
)
from wgc_runtime.contract.messages.orders import (
    CopyKv,
    ExportState,
    ForgetSession,
    ForwardPersisted,
    Release,
    SkipChunk,
    StartWalk,
    StreamAbandon,
    StreamDone,
)
from wgc_runtime.contract.messages.reports import (
    ChunkReady,
    ChunksDone,
    ClientOut,
    Emitted,
    Failed,
    Finished,
    Output,
    StateImported,
    WalkDone,
)
from wgc_runtime.contract.route import ROUTE_SEP, base_id, routable, route, routed_id
from wgc_runtime.contract.spec import Dest

# what moves between the cores (conductor <-> ranks, rank <-> rank)
CORE = (
    ForgetSession,
    StartWalk,
    ForwardPersisted,
    StreamDone,
    StreamAbandon,
    SkipChunk,
    Release,
    ExportState,
    CopyKv,
    Value,
    Until,
    StreamItem,
    StreamAck,
    StreamAcks,
    StatePart,
    StateEnd,
    WalkDone,
    StateImported,
    ChunkReady,
    ChunksDone,
    ClientOut,
    Emitted,
    Failed,
    Output,  # a routed request's output a rank could not send its client: passed on
)

__all__ = [
    "CLIENT",
    "CONDUCTOR",
    "CORE",
    "ROUTE_SEP",
    "Cause",
    "ChunkReady",
    "ChunksDone",
    "ClientOut",
    "CopyKv",
    "Dest",
    "Edge",
    "Emitted",
    "ExportState",
    "FailKind",
    "Failed",
    "Finished",
    "ForgetSession",
    "ForwardPersisted",
    "Iters",
    "Message",
    "Output",
    "Release",
    "SkipChunk",
    "StartWalk",
    "StateEnd",
    "StateImported",
    "StatePart",
    "StreamAbandon",
    "StreamAck",
    "StreamAcks",
    "StreamDone",
    "StreamItem",
    "StreamItems",
    "Until",
    "Value",
    "WalkDone",
    "base_id",
    "pack_items",
    "routable",
    "route",
    "routed_id",
    "unpack_acks",
    "unpack_items",
]
