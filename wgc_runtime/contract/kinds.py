"""Every kind the contract names, as `StrEnum`s.

A plan record's kind fields (an input's mode, a destination's kind and edge, a node's engine, a
stream's policy ...) take one of these. They are `str` subclasses, so they compare equal to their
value, dump to JSON and msgpack as it, and generated modules spell them as members
(``InputMode.CARRIED``) so a misspelled kind is an `AttributeError` at import, not a silent
mismatch at run time. Standard library only.
"""

from __future__ import annotations

from enum import StrEnum


class InputMode(StrEnum):
    """How a call input receives its values (see `wgc_runtime.contract.spec.PortIn`)."""

    ONCE = "once"  # one value per walk instance, kept for every iteration of enclosing loops
    PER_ITERATION = "per_iteration"  # one value per iteration of the innermost loop
    CARRIED = "carried"  # iteration 0 from ``init``, iteration i+1 from iteration i's ``src``
    STREAM = "stream"  # the next chunk of a stream


class SourceKind(StrEnum):
    INPUT = "input"  # a walk input
    CALL = "call"  # an output port of a call
    STREAM = "stream"  # a stream's chunks


class DestKind(StrEnum):
    CALL = "call"  # an input port of a call (this rank: in place; another: the transport)
    CLIENT = "client"  # emitted to the client
    PERSIST = "persist"  # kept for a later walk of the request
    STREAM = "stream"  # appended to a stream buffer
    UNTIL = "until"  # the stop condition of a loop


class Edge(StrEnum):
    """When a value travels (the IR's edge kinds)."""

    INPUT = "input"
    INTERNAL = "internal"
    LOOP_INIT = "loop_init"
    LOOP_CARRIED = "loop_carried"
    LOOP_INVARIANT = "loop_invariant"
    TERMINAL = "terminal"
    ACCUMULATED = "accumulated"
    EMITTED = "emitted"
    PERSISTED = "persisted"
    STREAMED = "streamed"
    UNTIL = "until"


class Engine(StrEnum):
    STATELESS = "stateless"
    KV_CACHE = "kv_cache"


class Policy(StrEnum):
    """A stream's chunk policy."""

    FIXED = "fixed"
    SLIDING = "sliding"
    LEFT_CONTEXT = "left_context"


class FinalMode(StrEnum):
    """What a stream does with its residual fragment when the producer is done."""

    PARTIAL = "partial"
    PAD = "pad"
    DROP = "drop"


class CaptureScope(StrEnum):
    LOOP = "loop"  # a whole loop body on one rank
    CALL = "call"  # one node step


class FlowKind(StrEnum):
    ALWAYS = "always"  # runs for every request
    WHEN = "when"  # runs beside the others when its condition holds
    ON_STREAM = "on_stream"  # its body runs once per chunk of a stream
    EXTERN = "extern"  # a ``module:function`` generator the conductor imports


class OptionType(StrEnum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"


class AttentionKind(StrEnum):
    """The placement's ``attention:`` backend (``auto``: the best one available)."""

    AUTO = "auto"
    TORCH = "torch"
    TRITON = "triton"
    FLASHINFER = "flashinfer"


class CaptureBackend(StrEnum):
    """The placement's ``batching.backend``: how captured units run (``auto``: CUDA graphs on
    a CUDA device, eager elsewhere; ``inductor``: one ``torch.compile`` artifact per bucket)."""

    AUTO = "auto"
    EAGER = "eager"
    CUDA_GRAPH = "cuda_graph"
    INDUCTOR = "inductor"


class OnRestart(StrEnum):
    """What a worker's restart does to a request in flight on a walk's pieces
    (`wgc_runtime.contract.conductor.WalkSpec.on_restart`; the placement's ``on_restart:``)."""

    FAIL = "fail"  # it fails at once, naming the rank
    REPLAY = "replay"  # it runs again from its start once the rank is back


class FailKind(StrEnum):
    """Why a request failed (the reference interpreter's kinds, plus the runtime's own)."""

    NODE = "node"  # a node raised
    OUTPUT = "output"  # a node returned outputs its ports do not allow
    STREAM = "stream"  # a stream was misused
    FLOW = "flow"  # a flow could not go on (an unknown walk, a missing input ...)
    FAIL = "fail"  # a flow's `fail`
    TIMEOUT = "timeout"  # a deadline passed
    DEADLOCK = "deadlock"  # nothing can move
    CANCELLED = "cancelled"  # the client cancelled it
    REJECTED = "rejected"  # refused at the door (a bad request)
    BUSY = "busy"  # its session has a request running, or every session has (HTTP 429)
    INTERNAL = "internal"  # a bug, or a broken deployment (a rank died)


class Cause(StrEnum):
    """Whose fault a node's failure is (`messages.Failed.cause`), decided where the executor
    catches the node's exception: ``input`` when the node refused a value of the request
    (it raised `ValueError` or `TypeError`, `node.NodeInputError` among them: HTTP 400), else
    ``internal`` (a bug or a broken node: HTTP 500)."""

    INPUT = "input"
    INTERNAL = "internal"
