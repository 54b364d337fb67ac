"""Linears fused for the decode step: fewer tensor operations per token.

A decode step of a small model is dominated by the number of tensor operations, not their
FLOPs. `FusedLinears` runs several linears that read the same input (q/k/v, gate/up) as ONE
matrix product; `linear_add` folds a residual add into the product (``addmm``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class FusedLinears:
    """One weight (and bias) for several linears that read the same input: one matrix product
    instead of several. The linears' parameters are re-pointed at slices of the fused tensor,
    so the model holds each weight once, in-place updates of a parameter (loading, ``copy_``)
    reach the fused weight, and a parameter that was replaced (``.to(dtype)``, a new
    ``Parameter``) is noticed by address and the fusion redone."""

    __slots__ = ("bias", "key", "linears", "weight")

    def __init__(self, linears: Sequence[nn.Linear]):
        self.linears = tuple(linears)
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.key: tuple[int, ...] = ()

    def _addresses(self) -> tuple[int, ...]:
        # `_parameters` directly: this runs every step, Module.__getattr__ is slow
        return tuple(
            -1 if p is None else p.data_ptr()
            for m in self.linears
            for p in (m._parameters["weight"], m._parameters["bias"])  # pyright: ignore[reportPrivateUsage] (see above)
        )

    def get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The fused weight and bias (None when no linear has a bias)."""
        weight = self.weight
        if weight is not None and torch.compiler.is_compiling():
            # a compiled step (`GraphRunner` backend "inductor") cannot compare addresses; its
            # eager warm-up built the fusion, and it captures the fused tensors like a graph
            return weight, self.bias
        if weight is None or self._addresses() != self.key:
            weight = self._build()
        return weight, self.bias

    def _build(self) -> torch.Tensor:
        with torch.inference_mode(False), torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in self.linears])
            bias = None
            biases = [linear_bias(m) for m in self.linears]
            if any(b is not None for b in biases):
                bias = torch.cat(
                    [
                        b.detach() if b is not None else m.weight.new_zeros(m.weight.shape[0])
                        for m, b in zip(self.linears, biases, strict=True)
                    ]
                )
            start = 0
            for m, b in zip(self.linears, biases, strict=True):
                n = m.weight.shape[0]
                m.weight.data = weight[start : start + n]
                if b is not None and bias is not None:
                    b.data = bias[start : start + n]
                start += n
        self.weight, self.bias = weight, bias
        self.key = self._addresses()
        return weight


def linear_bias(lin: nn.Linear) -> torch.Tensor | None:
    """``lin.bias``: torch types it as always set, but ``bias=False`` leaves it None."""
    bias: torch.Tensor | None = lin.bias
    return bias


def linear_add(x: torch.Tensor, a: torch.Tensor, lin: nn.Linear) -> torch.Tensor:
    """``x + lin(a)``, the residual add fused into the matrix product when there is no bias."""
    if linear_bias(lin) is None and x.dim() == 2:
        return torch.addmm(x, a, lin.weight.t())
    return x + lin(a)
