"""The node interface: what a node implementation (`impl "module:Class"`) provides.

A node class subclasses `Node`. The runtime constructs it once per rank that hosts the node, with
a `NodeContext` (its name, the `config` values of its `.walk` declaration, its device, engine
kind, KV labels, tensor-parallel rank and size, its declared port types, the plan's capture units
for its calls, and the rank's serving settings: KV cache, batching, attention), then calls
`forward` with the requests that are ready together for one (node, walk) pair.

Contract:

* **Port values are per request**: no batch dimension. A port's value is a `torch.Tensor`, or
  `None` for a *bare signal* (an optional walk input the flow did not pass; the node makes its own
  default, e.g. noise seeded from the request).
* A call reads only the ports it names (plus the node's stream-fed ports) and returns a dict with
  at least the output ports it binds (`CallContext.writes`). Streamed producer ports it returns
  are appended to their streams whether or not the call binds them; a node may leave them out of
  a call's result (a Talker prefill step produces no codec token).
* Returned tensors must match the declared port types: dtype and every static dim
  (`check_outputs`). The runtime checks every call and fails the request with a
  `NodeOutputError` naming node, port, expected and actual type.
* Per-request state lives in `CallContext.state`, a dict the runtime keeps per (request, node)
  for the whole request and drops when it ends (then it calls `release(request_id)`).
* **A `kv_cache` node's cache is the runtime's** (`CallContext.kv`, a `KvCache`): the
  request's sequences, one per label, in the rank's paged pool for the node (sized by the
  placement's ``kv_cache:`` and the node's ``config layers / kv_heads / head_dim``). A call
  appends its tokens' keys and values (`KvCache.append`), reads them back
  (`KvCache.keys_values`), attends over them (`KvCache.attend`, the paged-attention function
  of the placement's backend, computed on the CPU with torch), forks a label into another
  (copy on branch) or drops one. The pages are freed when the request ends, fails, is
  cancelled or passes its deadline. A ``like X { label L }`` copy reads X's label L (its
  handle is read-only): in X's pool when both run on one rank group, else in a copy the
  runtime makes before each walk that reads it. Engines that batch requests themselves (a
  decoder's continuous batching) take the pool and the request's key from the handle. A node
  class that sets `Node.serves_copies` may be handed its copies' calls in its own batches.
* When a placement runs a kv-cache node's walks on different rank groups (prefill on one,
  decode on another), the request's state moves between them: its KV pages (every label) and
  what `export_state` turns the rest into (named tensors, which travel like any port value;
  `import_state` takes them on the new group), before the next walk of the node starts there.
  The defaults move the `CallContext.state` dict (tensors, ints, floats and bools); a node
  keeping state elsewhere overrides both.
* A stream-fed input port comes with a `ChunkInfo` in `CallContext.chunks[port]`: chunk index,
  valid rows on dim 0 (the rest is padding), and whether it is the stream's final chunk.
* A call the plan lists as capturable (a static loop body's step) runs as a captured unit when
  the node offers one (`Node.static_step`, `wgc_runtime.contract.capture`): batched, padded to
  a bucket, recorded once per bucket. It must compute what `forward` computes.
* Nodes are deterministic given their inputs and context (seed any sampling from
  `CallContext.seed()`), so the reference interpreter and the compiled runtime agree exactly.

Import the node API from here, its one documented path (``docs/nodes.md``): the package
re-exports what its modules define, `base` (`Node`, the state encoding), `context` (`NodeContext`,
`CallContext`, `KvCache`, `ChunkInfo`, `Work`), `values` (dtypes, `check_outputs`, `to_tensor`)
and `errors` (`NodeError` and its kinds). It needs torch and nothing else; it never imports the
compiler.
"""

from __future__ import annotations

from wgc_runtime.contract.capture import CapturedCall, StaticStep
from wgc_runtime.contract.flow import SEED_OPTION
from wgc_runtime.contract.kinds import Engine
from wgc_runtime.contract.node.base import Node, decode_state, encode_state
from wgc_runtime.contract.node.context import CallContext, ChunkInfo, KvCache, NodeContext, Work
from wgc_runtime.contract.node.errors import NodeError, NodeInputError, NodeOutputError
from wgc_runtime.contract.node.values import (
    DTYPE_NAMES,
    DTYPES,
    check_outputs,
    render_tensor,
    to_tensor,
)
from wgc_runtime.contract.spec import (
    AttentionSpec,
    BatchingSpec,
    CaptureSpec,
    KvCacheSpec,
    render_type,
    type_parts,
)
from wgc_runtime.contract.weights import WeightParts

__all__ = [
    "DTYPES",
    "DTYPE_NAMES",
    "SEED_OPTION",
    "AttentionSpec",
    "BatchingSpec",
    "CallContext",
    "CaptureSpec",
    "CapturedCall",
    "ChunkInfo",
    "Engine",
    "KvCache",
    "KvCacheSpec",
    "Node",
    "NodeContext",
    "NodeError",
    "NodeInputError",
    "NodeOutputError",
    "StaticStep",
    "WeightParts",
    "Work",
    "check_outputs",
    "decode_state",
    "encode_state",
    "render_tensor",
    "render_type",
    "to_tensor",
    "type_parts",
]
