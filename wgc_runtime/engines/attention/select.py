"""Choosing an attention backend: by the placement's ``attention`` setting or automatically.

``auto``: FlashInfer when it is importable and the device is CUDA, else Triton when the device is
CUDA and triton is importable, else the torch reference. An explicit choice that cannot run on
the device raises `BackendUnavailable` with the reason (no silent fallback: the placement said
which backend it wants).
"""

from __future__ import annotations

import importlib.util

import torch

from wgc_runtime.engines.attention.base import AttentionBackend

CHOICES = ("auto", "torch", "triton", "flashinfer")


class BackendUnavailable(RuntimeError):
    pass


def backend_class(name: str) -> type[AttentionBackend]:
    """The class of backend ``name`` (imports it; triton/flashinfer load only when asked)."""
    if name == "torch":
        from wgc_runtime.engines.attention.torch_backend import TorchAttention

        return TorchAttention
    if name == "triton":
        from wgc_runtime.engines.attention.triton_backend import TritonAttention

        return TritonAttention
    if name == "flashinfer":
        from wgc_runtime.engines.attention.flashinfer_backend import FlashInferAttention

        return FlashInferAttention
    raise ValueError(f"unknown attention backend `{name}` (one of {', '.join(CHOICES)})")


def resolve(name: str = "auto", device: str | torch.device = "cpu") -> str:
    """The backend name ``name`` means on ``device``."""
    dev = torch.device(device)
    if name == "auto":
        if dev.type == "cuda" and importlib.util.find_spec("flashinfer") is not None:
            return "flashinfer"
        if dev.type == "cuda" and importlib.util.find_spec("triton") is not None:
            return "triton"
        return "torch"
    if name not in CHOICES:
        raise ValueError(f"unknown attention backend `{name}` (one of {', '.join(CHOICES)})")
    if not backend_class(name).available(dev):
        why = {
            "triton": "needs triton and a CUDA device (or TRITON_INTERPRET=1)",
            "flashinfer": "needs the flashinfer-python package and a CUDA device",
        }.get(name, "")
        raise BackendUnavailable(f"attention backend `{name}` cannot run on `{dev}`: {why}")
    return name


def make_backend(
    name: str = "auto",
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    scale: float | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> AttentionBackend:
    """An attention backend for one engine (``name`` as in the placement's ``attention``)."""
    cls = backend_class(resolve(name, device))
    return cls(
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        page_size=page_size,
        scale=scale,
        device=device,
        dtype=dtype,
    )
