"""Engines: the state a node keeps across the calls of a request.

`kv_pool.PagedKVPool` is the paged KV cache of a `kv_cache` node (one pool per engine, page
tables per request and label); the attention backends that read it live in
`wgc_runtime.engines.attention`; `wgc_runtime.engines.capture` replays shape-static units at
batch buckets (CUDA graphs, or compiled / eager on the CPU); `batching.StepEngine` is what a
decoder engine offers its nodes, and `decode_runner` runs a kv-cache node's decode batch.
Engines never import
`wgc_runtime.components` (the model layers use the engines, not the other way round).
"""

from wgc_runtime.engines.kv_pool import PagedKVPool, PageTable, PoolFull, PoolStats

__all__ = ["PageTable", "PagedKVPool", "PoolFull", "PoolStats"]
