"""Bounded ports (`i64[<=K]`) of a captured call: values padded to their bound, and cut back.

A bounded port holds 0 to K elements along its first dim; the plan captures its call at the
bound (`CaptureSpec.padded`). Going in, `pad_rows` stacks a batch's values into one
``[n, K, *rest]`` tensor (zeros past each value's end) with their true lengths ``[n]``, which
the step reads under `wgc_runtime.contract.capture.length_key` of the port. Coming out, the step
returns the padded output and its lengths under the same key, and `cut_rows` gives each row its
value at its own length again.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_rows(
    values: Sequence[object], dims: tuple[int, ...], dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``values`` (each ``[m, *dims[1:]]``, ``m <= dims[0]``) padded to ``dims`` and stacked, and
    their lengths ``m``; None when one is not such a tensor (then the call runs `forward`)."""
    bound, rest = dims[0], dims[1:]
    out = torch.zeros((len(values), *dims), dtype=dtype)
    lengths = torch.empty(len(values), dtype=torch.int64)
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor) or v.dtype is not dtype or v.dim() != len(dims):
            return None
        if tuple(v.shape[1:]) != rest or v.shape[0] > bound:
            return None
        out[i, : v.shape[0]] = v
        lengths[i] = v.shape[0]
    return out, lengths


def cut_rows(padded: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    """Each row of ``padded`` (``[n, K, ...]``) cut to its length (one host read for the batch);
    the rows are copies (the runner's buffers are reused)."""
    bound = padded.shape[1]
    sizes = [int(n) for n in lengths.reshape(-1).tolist()]
    if len(sizes) != padded.shape[0] or any(not 0 <= n <= bound for n in sizes):
        raise ValueError(f"lengths {sizes} do not fit {padded.shape[0]} rows of at most {bound}")
    return [padded[i, :n].clone() for i, n in enumerate(sizes)]
