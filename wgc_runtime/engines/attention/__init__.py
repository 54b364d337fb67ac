"""Paged attention backends over a `wgc_runtime.engines.PagedKVPool`.

`base` holds the interface (`AttentionBackend`) and the per-batch `AttentionMetadata`;
`torch_backend` is the reference (CPU and GPU), `triton_backend` runs Triton kernels (GPU, or
the Triton interpreter on the CPU), `flashinfer_backend` wraps FlashInfer's paged wrappers (GPU).
`select.make_backend` picks one from the placement's ``attention`` setting.
"""

from wgc_runtime.engines.attention.base import (
    AttentionBackend,
    AttentionMetadata,
    build_metadata,
    prepare_step,
)
from wgc_runtime.engines.attention.select import (
    BackendUnavailable,
    backend_class,
    make_backend,
    resolve,
)

__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "BackendUnavailable",
    "backend_class",
    "build_metadata",
    "make_backend",
    "prepare_step",
    "resolve",
]
