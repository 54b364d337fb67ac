"""The plan records: what lowering builds, generated modules construct, and the runtime reads.

One schema for both sides. `wgc compile` lowers a model and a placement into these records
(`wgc.lower`), dumps them to ``plan.json`` and renders them as constructor calls in one module per
rank (``RANK = RankSpec(...)``) and a conductor module (``CONDUCTOR = ConductorSpec(...)``, with
every flow as a generator function, see `wgc_runtime.contract.flow`). Standard library only, so a
generated module imports in milliseconds on any machine; this module never imports the compiler.
Kinds are `StrEnum`s (`wgc_runtime.contract.kinds`).

This package is the records' one import path (generated modules import them from here); they
live by family: `version` (`SPEC_VERSION`), `ports` (types, sources, destinations), `pieces`
(pieces of walks, their calls and loops) and `ranks` (what a rank hosts and its settings).

Every generated module states the `SPEC_VERSION` it was written for; the runtime refuses a
module of another version before importing it (`check_spec_version`), and ``plan.json`` carries
it as ``"version"``. Any change to these records that an older module could not satisfy bumps it.

The execution contract:

* A *piece* (`PieceSpec`) is the part of one walk that one rank runs: its calls, its sink units,
  and its own copy of every loop it takes part in (`LoopSpec`; ``ranks`` lists every rank with a
  copy, so the copies can agree on when the loop ends). A worker runs a piece from its
  `RankSpec` alone. The compiler does the indexing: which units sit directly in the piece's top
  level (``body``) or a loop (`LoopSpec.body`), which loops nest where (``nested``), each loop's
  chain of enclosing loops and its place in statement order (``order``), which calls push to or
  take chunks of which stream (``producers`` / ``consumers``).
* Every call input (`PortIn`) has a ``mode`` (`InputMode`): ``once`` (one value per walk
  instance, kept for every iteration of enclosing loops), ``per_iteration`` (one value per
  iteration of the innermost loop), ``carried`` (iteration 0 reads ``init``, iteration i+1 reads
  ``src`` of iteration i of loop ``loop``), or ``stream`` (the next chunk of stream ``src.name``).
  ``optional`` inputs may arrive as a bare signal (no tensor): the node makes its own default.
* Every call output (`PortOut`) has destinations (`Dest`, `DestKind`): ``call`` (a call on the
  same rank: an in-process hand-off; on another rank: the transport), ``client`` (emit),
  ``persist`` (kept for a later walk of the request), ``stream`` (appended to a stream buffer),
  ``until`` (the stop condition of a loop; every rank in ``ranks`` must learn it). ``edge``
  (`Edge`) says when the value travels: ``loop_carried`` feeds the next iteration, ``terminal``
  travels once after the loop, ``accumulated`` is stacked over iterations and travels after the
  loop, the rest at once. A ``carried`` destination gets the value at the next iteration of
  ``loop`` (a read written before the binding in the body), so the last iteration's value is
  never delivered. For a ``stream`` destination ``rank`` is the stream's owner; a ``client``
  one names the emitted ``channel``.
* An `emit` / `persist` in a loop of a value from outside the loop's iteration is a `SinkSpec`
  of the piece: a node-less unit that fires once per iteration, fed like a call input.

Node state moves between rank groups when a kv-cache node runs its walks on several groups
(prefill on one, decode on another): `WalkSpec.handoffs` lists the moves that may be due before a
walk starts, `WalkSpec.kv_groups` where each such node's state lives once it started; the
conductor tracks, per request, where each node's state lives and runs the moves.
"""

from __future__ import annotations

# the kinds the records use, importable from here as before the split
from wgc_runtime.contract.kinds import (
    AttentionKind,
    CaptureBackend,
    CaptureScope,
    DestKind,
    Edge,
    Engine,
    FinalMode,
    InputMode,
    Policy,
    SourceKind,
)
from wgc_runtime.contract.spec.pieces import CallSpec, LoopSpec, PieceSpec, SinkSpec, Unit
from wgc_runtime.contract.spec.ports import (
    ITEMSIZE,
    KV_ITEMSIZE,
    Dest,
    Dims,
    PortIn,
    PortOut,
    Source,
    TypeSpec,
    render_type,
    type_parts,
)
from wgc_runtime.contract.spec.ranks import (
    AttentionSpec,
    BatchingSpec,
    CaptureSpec,
    KvCacheSpec,
    KvPoolSpec,
    MemorySpec,
    NodeSpec,
    RankSpec,
    StreamSpec,
)
from wgc_runtime.contract.spec.version import (
    OMIT_DEFAULT,
    SPEC_VERSION,
    SpecVersionError,
    check_spec_version,
)

__all__ = [
    "ITEMSIZE",
    "KV_ITEMSIZE",
    "OMIT_DEFAULT",
    "SPEC_VERSION",
    "AttentionKind",
    "AttentionSpec",
    "BatchingSpec",
    "CallSpec",
    "CaptureBackend",
    "CaptureScope",
    "CaptureSpec",
    "Dest",
    "DestKind",
    "Dims",
    "Edge",
    "Engine",
    "FinalMode",
    "InputMode",
    "KvCacheSpec",
    "KvPoolSpec",
    "LoopSpec",
    "MemorySpec",
    "NodeSpec",
    "PieceSpec",
    "Policy",
    "PortIn",
    "PortOut",
    "RankSpec",
    "SinkSpec",
    "Source",
    "SourceKind",
    "SpecVersionError",
    "StreamSpec",
    "TypeSpec",
    "Unit",
    "check_spec_version",
    "render_type",
    "type_parts",
]
