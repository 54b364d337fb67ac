"""A static memory estimate per rank: KV pages, captured static buffers, stream buffers.

* KV cache: for every kv-cache node's pool on the rank (`wgc.lower.kv`: the node's geometry
  from its config, its shard of the heads under tensor parallelism, the placement's pages, page
  size and dtype), exactly the bytes the runtime allocates (`KvPoolSpec.nbytes`); a copy that
  reads its owner's pool on the rank adds nothing.
* Static buffers: for every capture entry on the rank, the bytes of its static ports times the
  largest capture bucket (a captured graph keeps its buffers at the largest batch).
* Streams: for every stream the rank owns, ``capacity * bytes of one item`` (0 when the item
  shape is dynamic: it is bounded only at run time).
"""

from __future__ import annotations

from wgc.lower.typespec import spec_nbytes
from wgc_runtime.contract.spec import CaptureSpec, MemorySpec, NodeSpec, StreamSpec


def estimate(
    nodes: list[NodeSpec],
    captures: list[CaptureSpec],
    streams: list[StreamSpec],
) -> MemorySpec:
    kv_total = sum(n.kv.nbytes for n in nodes if n.kv is not None)
    static = 0
    for c in captures:
        port_bytes = sum(spec_nbytes(t) or 0 for _, t in c.ports)
        static += port_bytes * (max(c.buckets) if c.buckets else 1)
    stream = sum(s.capacity * (spec_nbytes(s.item) or 0) for s in streams)
    return MemorySpec(kv_bytes=kv_total, static_buffer_bytes=static, stream_bytes=stream)
