"""A static memory estimate per rank: KV pages, captured static buffers, stream buffers.

* KV cache, per `kv_cache` node hosted on the rank (each node has its own page pool; its labels
  share it): ``pages * page_size * 2 (K and V) * bytes_per_token / tp``, where
  ``bytes_per_token = layers * width * itemsize(kv dtype)``. The compiler does not know the
  network, so it reads the node's `config`: ``layers`` (default 1) and ``kv_heads * head_dim``
  for the width, else ``config hidden``, else the model's ``param hidden``, else 1.
* Static buffers: for every capture entry on the rank, the bytes of its static ports times the
  largest capture bucket (a captured graph keeps its buffers at the largest batch).
* Streams: for every stream the rank owns, ``capacity * bytes of one item`` (0 when the item
  shape is dynamic: it is bounded only at run time).
"""

from __future__ import annotations

from wgc.ir.model import Model
from wgc.lower.typespec import itemsize, spec_nbytes
from wgc_runtime.contract.kinds import Engine
from wgc_runtime.contract.spec import CaptureSpec, KvCacheSpec, MemorySpec, NodeSpec, StreamSpec


def _int(v: object) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return int(v) if v > 0 else None


def kv_bytes_per_token(model: Model, node: NodeSpec, dtype: str) -> int:
    cfg = dict(node.config)
    layers = _int(cfg.get("layers")) or 1
    heads, head_dim = _int(cfg.get("kv_heads")), _int(cfg.get("head_dim"))
    if heads and head_dim:
        width = heads * head_dim
    else:
        hidden = model.param("hidden")
        width = _int(cfg.get("hidden")) or _int(hidden.value if hidden else None) or 1
    return layers * width * itemsize(dtype)


def kv_bytes(model: Model, node: NodeSpec, kv: KvCacheSpec) -> int:
    if node.engine != Engine.KV_CACHE:
        return 0
    total = kv.pages * kv.page_size * 2 * kv_bytes_per_token(model, node, kv.dtype)
    return -(-total // max(1, node.tp))


def estimate(
    model: Model,
    nodes: list[NodeSpec],
    captures: list[CaptureSpec],
    streams: list[StreamSpec],
    kv: KvCacheSpec,
) -> MemorySpec:
    kv_total = sum(kv_bytes(model, n, kv) for n in nodes)
    static = 0
    for c in captures:
        port_bytes = sum(spec_nbytes(t) or 0 for _, t in c.ports)
        static += port_bytes * (max(c.buckets) if c.buckets else 1)
    stream = sum(s.capacity * (spec_nbytes(s.item) or 0) for s in streams)
    return MemorySpec(kv_bytes=kv_total, static_buffer_bytes=static, stream_bytes=stream)
