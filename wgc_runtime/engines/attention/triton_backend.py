"""The Triton backend: paged decode and paged prefill kernels (`triton_kernels`) over the pool.

Needs triton and a CUDA device, or the Triton interpreter (``TRITON_INTERPRET=1`` in the
environment before triton is imported; CPU tensors then work, slowly: tests use tiny shapes).
The page size must be a power of two (it is a block dimension of the kernels).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import torch

from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata


def _launcher(kernel: Any, grid: tuple[int, ...]) -> Callable[..., None]:
    """``kernel[grid]``, typed as taking any arguments. Triton types a launch with the kernel's
    Python signature, so its ``tl.constexpr`` parameters would reject the plain ints and bools
    that a launch takes (and triton wraps)."""
    return kernel[grid]


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TritonAttention(AttentionBackend):
    name = "triton"
    block_m = 32  # query rows per prefill program

    def __init__(self, **kw):
        super().__init__(**kw)
        ps = self.page_size
        if ps & (ps - 1):
            raise ValueError(f"the triton backend needs a power-of-two page size, not {ps}")
        from wgc_runtime.engines.attention import triton_kernels

        self.k = triton_kernels
        self.block_d = triton_kernels.next_pow2(self.head_dim)

    @classmethod
    def available(cls, device: str | torch.device = "cpu") -> bool:
        if importlib.util.find_spec("triton") is None:
            return False
        return torch.device(device).type == "cuda" or interpreter_on()

    def decode(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        q = q.to(kv_layer.dtype).contiguous()
        out = torch.empty_like(q)
        bt = meta.block_tables
        launch = _launcher(self.k.paged_decode_kernel, (meta.batch, self.num_heads))
        launch(
            q,
            kv_layer,
            bt,
            meta.kv_lens_t,
            out,
            self.scale,
            q.stride(0),
            q.stride(1),
            kv_layer.stride(0),
            kv_layer.stride(1),
            kv_layer.stride(2),
            kv_layer.stride(3),
            bt.stride(0),
            out.stride(0),
            out.stride(1),
            GROUP=self.group,
            HEAD_DIM=self.head_dim,
            BLOCK_D=self.block_d,
            PAGE=self.page_size,
        )
        return out

    def prefill(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        q = q.to(kv_layer.dtype).contiguous()
        out = torch.empty_like(q)
        bt = meta.block_tables
        block_m = self.block_m if meta.max_q_len > 16 else 16
        use_dot = self.page_size >= 16 and self.block_d >= 16
        grid = (meta.batch, self.num_heads, -(-meta.max_q_len // block_m))
        launch = _launcher(self.k.paged_prefill_kernel, grid)
        launch(
            q,
            kv_layer,
            bt,
            meta.qo_indptr,
            meta.kv_lens_t,
            out,
            self.scale,
            q.stride(0),
            q.stride(1),
            kv_layer.stride(0),
            kv_layer.stride(1),
            kv_layer.stride(2),
            kv_layer.stride(3),
            bt.stride(0),
            out.stride(0),
            out.stride(1),
            GROUP=self.group,
            HEAD_DIM=self.head_dim,
            BLOCK_D=self.block_d,
            PAGE=self.page_size,
            BLOCK_M=block_m,
            USE_DOT=use_dot,
            IEEE=kv_layer.dtype == torch.float32,
        )
        return out
