"""The FlashInfer backend (GPU only; ``pip install flashinfer-python``, the ``gpu`` extra).

One `BatchPrefillWithPagedKVCacheWrapper` and one `BatchDecodeWithPagedKVCacheWrapper` per
engine, sharing a workspace buffer. `plan` runs once per batch with the batch's CSR page tables
(``kv_indptr``, ``kv_indices``, ``kv_last_page_len``; plus ``qo_indptr`` for prefill) and the
head geometry; every layer then calls ``run(q, kv_layer)``. The pool's per-layer tensor
``[pages, 2, page_size, kv_heads, head_dim]`` is FlashInfer's NHD paged layout as is. Prefill is
causal with FlashInfer's bottom-right alignment (the same as the other backends). FlashInfer
kernels take half-precision data (``f16``/``bf16``); an ``f32`` pool needs another backend.
"""

from __future__ import annotations

import importlib.util

import torch

from wgc_runtime.engines.attention.base import AttentionBackend, AttentionMetadata

WORKSPACE_BYTES = 128 * 1024 * 1024


class FlashInferAttention(AttentionBackend):
    name = "flashinfer"

    def __init__(self, **kw):
        super().__init__(**kw)
        if self.device.type != "cuda":
            raise RuntimeError("the flashinfer attention backend needs a CUDA device")
        import flashinfer  # pyright: ignore[reportMissingImports]  (optional GPU dependency)

        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD")
        self.decode_wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD")
        self._planned: AttentionMetadata | None = None

    @classmethod
    def available(cls, device: str | torch.device = "cpu") -> bool:
        return (
            torch.device(device).type == "cuda"
            and torch.cuda.is_available()
            and importlib.util.find_spec("flashinfer") is not None
        )

    def plan(self, meta: AttentionMetadata) -> None:
        super().plan(meta)
        # the leading page-table and geometry arguments are positional: their keyword names
        # changed across FlashInfer releases (`head_dim` → `head_dim_qk`), their order did not
        geometry = (self.num_heads, self.num_kv_heads, self.head_dim, self.page_size)
        common = dict(sm_scale=self.scale, q_data_type=self.dtype, kv_data_type=self.dtype)
        if meta.is_decode:
            self.decode_wrapper.plan(
                meta.kv_indptr,
                meta.kv_indices,
                meta.kv_last_page_len,
                *geometry,
                pos_encoding_mode="NONE",
                **common,
            )
        else:
            self.prefill_wrapper.plan(
                meta.qo_indptr,
                meta.kv_indptr,
                meta.kv_indices,
                meta.kv_last_page_len,
                *geometry,
                causal=True,
                **common,
            )
        self._planned = meta

    def _ensure(self, meta: AttentionMetadata) -> None:
        if self._planned is not meta:
            self.plan(meta)

    def decode(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        self._ensure(meta)
        return self.decode_wrapper.run(q.to(kv_layer.dtype).contiguous(), kv_layer).to(q.dtype)

    def prefill(
        self, q: torch.Tensor, kv_layer: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        self._ensure(meta)
        return self.prefill_wrapper.run(q.to(kv_layer.dtype).contiguous(), kv_layer).to(q.dtype)
