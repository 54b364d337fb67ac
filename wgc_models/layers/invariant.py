"""Batch-invariant linear layers: a row's result does not depend on what it is batched with.

A node's ``forward`` runs the ready calls of many requests as one batch, and the runtime must
give each request exactly (bit for bit) what the reference interpreter gives it alone. A
matrix product does not: BLAS picks its kernel and its blocking of the reduction by the number
of rows, so row ``i`` of ``X @ W`` changes in its last bits with the rows around it (measured on
the CPU: one row alone, in a batch of 2 and in a batch of 3 give three different results).

`Linear` (an ``nn.Linear``: same parameters, same checkpoint names) multiplies in chunks of
exactly `ROWS` rows, the last one zero-padded: every product the layer runs has the same shape,
so every row goes through the same kernel with the same blocking, whatever the batch. The cost
is the padding of the last chunk (at most ``ROWS - 1`` rows) and one product per ``ROWS`` rows
instead of one in all; the elementwise and row-wise operations around it (norms, activations,
rotary, per-sequence attention) are invariant as they are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROWS = 32


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` in chunks of `ROWS` rows (module docstring)."""
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    n = flat.shape[0]
    pad = (-n) % ROWS
    if pad:
        flat = torch.cat((flat, flat.new_zeros((pad, flat.shape[1]))))
    out = torch.cat([F.linear(c, weight, bias) for c in torch.split(flat, ROWS)])
    return out[:n].reshape(*shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """``nn.Linear`` computed by `linear_rows`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return linear_rows(input, self.weight, self.bias)
