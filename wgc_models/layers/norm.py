"""RMSNorm, normalised in fp32 like Hugging Face's ``LlamaRMSNorm``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """``weight · x · rsqrt(mean(x²) + eps)``, with ``x`` normalised in fp32 and cast back
    before the weight is applied (HF's order)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # one op, the same math as below (x · rsqrt(mean(x²) + eps) · weight, in fp32)
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)
