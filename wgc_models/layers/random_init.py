"""Seeded random weights for a component whose checkpoint is not at hand (the examples' tiny
models; nothing can be downloaded): every matrix drawn at fan-in scale, norm weights and biases
perturbed so they matter, all from one seed, so every rank that builds the node gets the same
weights (and the reference interpreter the same as the runtime)."""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def init_seeded(module: M, seed: int, gain: float = 1.0, keep: tuple[str, ...] = ()) -> M:
    """Draw ``module``'s parameters from ``seed`` (the global RNG is left as it was); names
    containing any of ``keep`` keep their value (fixed tables such as sine-cosine positions)."""
    # torch's stub leaves a parameter of each untyped
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # pyright: ignore[reportUnknownMemberType]
        torch.manual_seed(seed)  # pyright: ignore[reportUnknownMemberType]
        for name, p in module.named_parameters():
            if any(k in name for k in keep):
                continue
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0, gain / fan_in**0.5)
            elif name.endswith("bias"):
                p.normal_(0, 0.02)
            elif "norm" in name and p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return module
