"""Batch-invariant 1-D convolutions for the vocoders: a row's result does not depend on how many
rows are computed with it.

A streaming vocoder decodes each request's windows as they fill; the executor hands it the
windows that are ready at once, from whichever requests they belong to. With ``F.conv1d`` the
answer for one window changes with the batch size (oneDNN picks a different algorithm, and at
the vocoders' few channels the batched ones are also slow: a 1x1 convolution of 16 windows of
4 channels x 2,132 samples takes ~620 µs on one core, against ~45 µs as a matrix product), so a
request's audio would depend on which other requests were being served. Here every operation
computes each row alone in the same order whatever the batch holds:

- a convolution with one group is a sum over the kernel's taps, in tap order, of the weight
  matrix of that tap times the input shifted by its dilation (``torch.matmul`` of a matrix and
  a batch of matrices: one product per row; a 1x1 convolution is one product);
- a depthwise convolution (one channel per group) is the same sum with a per-channel scale,
  one fused multiply-add (``addcmul_``) per tap: one rounding per element wherever it sits
  (ATen's vectorised and scalar paths both fuse it; the tests would see it if they did not);
- a transposed convolution whose kernel is a multiple of its stride is one matrix product per
  row followed by the overlap-add of the kernel's stride-long pieces, in piece order.

Other shapes (grouped convolutions with several channels per group, a transposed kernel that
is not a multiple of its stride) fall back to ``F.conv1d`` / ``F.conv_transpose1d``, which are
equal to these to float rounding but not batch-invariant. `tests/unit/test_conv1d.py` checks
both: equal to ``F`` to ~1e-6, and every row of a batch bit for bit the row computed alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def conv1d(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None = None,
    padding: int | tuple[int, int] = 0,
    dilation: int = 1,
    groups: int = 1,
) -> torch.Tensor:
    """``F.conv1d(x, w, bias, 1, padding, dilation, groups)`` (stride 1), batch-invariant;
    ``padding`` may be ``(left, right)`` zeros."""
    left, right = (padding, padding) if isinstance(padding, int) else padding
    cout, per_group, k = w.shape
    cin = x.shape[1]
    depthwise = groups == cin == cout and per_group == 1
    if groups != 1 and not depthwise:
        if left != right:
            return F.conv1d(F.pad(x, (left, right)), w, bias, 1, 0, dilation, groups)
        return F.conv1d(x, w, bias, 1, left, dilation, groups)
    if left or right:
        x = F.pad(x, (left, right))
    n = x.shape[-1] - dilation * (k - 1)
    if n <= 0:
        raise ValueError(f"a convolution of {k} taps (dilation {dilation}) over {x.shape[-1]}")
    taps = [x[..., t * dilation : t * dilation + n] for t in range(k)]
    if depthwise:  # one fused multiply-add pass per tap, the bias first
        scale = w[:, 0, :, None]  # [C, k, 1]
        if bias is None:
            y = taps[0] * scale[:, 0]
        else:
            y = torch.addcmul(bias[:, None], taps[0], scale[:, 0])
        for t in range(1, k):
            y.addcmul_(taps[t], scale[:, t])
        return y
    y = torch.matmul(w[:, :, 0], taps[0])
    for t in range(1, k):
        y.add_(torch.matmul(w[:, :, t], taps[t]))
    if bias is not None:
        y.add_(bias[:, None])
    return y


def conv_transpose1d(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
    steps_first: bool = False,
) -> torch.Tensor:
    """``F.conv_transpose1d(x, w, bias, stride, padding, output_padding, groups)`` (no
    dilation), batch-invariant with one group and a kernel a multiple of the stride.
    ``steps_first``: each row's product as ``xᵀ · W`` (input steps by output taps) instead of
    ``Wᵀ · x``: the same sums, a better shape for a short input with many taps (the first
    upsampling of a vocoder window: 15 steps, 512 taps, ~2x faster as one product here)."""
    cin, cout, k = w.shape
    if k % stride or groups != 1:
        return F.conv_transpose1d(x, w, bias, stride, padding, output_padding, groups)
    b, _, length = x.shape
    pieces = k // stride
    # every input step's contribution to the k output samples it reaches: [B, Cout, k, L]
    if steps_first:
        p = torch.matmul(x.transpose(1, 2), w.reshape(cin, cout * k)).transpose(1, 2)
        p = p.view(b, cout, k, length)
    else:
        p = torch.matmul(w.reshape(cin, cout * k).t(), x).view(b, cout, k, length)
    full = length + pieces - 1  # the stride-long output blocks the pieces reach
    y = x.new_zeros(b, cout, full, stride)
    for j in range(pieces):  # piece j of input step n lands in output block n + j
        y[:, :, j : j + length].add_(p[:, :, j * stride : (j + 1) * stride].transpose(2, 3))
    y = y.view(b, cout, full * stride)
    end = (length - 1) * stride - padding + k + output_padding
    if end > full * stride:
        y = F.pad(y, (0, end - full * stride))
    y = y[..., padding:end]
    if bias is not None:
        y = y + bias[:, None]
    return y
