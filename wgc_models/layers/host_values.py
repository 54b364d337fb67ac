"""Small tensors read back to the host as typed Python lists (torch's stub types
`Tensor.tolist` as ``list[Unknown]``; a caller that knows the dtype says so here, once)."""

from __future__ import annotations

from typing import cast

import torch


def int_list(t: torch.Tensor) -> list[int]:
    """The values of an integer tensor (any shape, flattened) as Python ints."""
    return cast(list[int], t.reshape(-1).tolist())  # pyright: ignore[reportUnknownMemberType] (stub: list[Unknown])


def int_rows(t: torch.Tensor) -> list[list[int]]:
    """The rows of a 2-D integer tensor as lists of Python ints (one host read)."""
    return cast(list[list[int]], t.tolist())  # pyright: ignore[reportUnknownMemberType] (stub: list[Unknown])
