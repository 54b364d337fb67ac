"""SNAC's decoder computed for one span of its output samples only (`decode_span`): what a
streaming vocoder that keeps part of each window needs (Orpheus keeps the second of a window's
four frames, a quarter of its samples).

Every layer of `wgc_models.orpheus.snac.Decoder` is a "same"-padded convolution, a
transposed convolution upsampling by its rate, or a pointwise step (`Snake1d`, ``tanh``, the
`NoiseBlock`'s 1x1 convolution), so an output sample depends on a bounded range of each layer's
input. `plan_span` walks the layers backwards from the wanted output span and finds, per layer,
the range of its input that span needs; `decode_span` then runs each layer on that range only,
padding with zeros exactly where the whole-window computation pads (at the window's edges) and
nowhere else. The result is the whole-window decode's samples in that span: the same sums of the
same products (a convolution over a shorter input may order its additions differently: equal to
~1e-7, not bit for bit; tested against the whole decode). Each `NoiseBlock` draws its noise for
the whole window from the generator, in the same order, and uses the span's part, so a seeded
decode sees the same noise.

At the high sample rates the layers' reach is a few samples, so they compute little more than
the span: at Orpheus's window (4 frames, one kept) the last, most expensive layers do about a
quarter of the whole window's work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from wgc_models.orpheus.conv1d import conv1d, conv_transpose1d
from wgc_models.orpheus.snac import (
    DecoderBlock,
    NoiseBlock,
    ResidualUnit,
    Snake1d,
    WNConv1d,
    draw_noise,
)

Span = tuple[int, int]  # [start, end) in one layer's sample positions


@dataclass(frozen=True, slots=True)
class Step:
    """One layer: the input span it reads, the output span it makes, its input length (for the
    edges: zero padding applies only there), and a residual unit's inner steps."""

    layer: nn.Module
    read: Span
    make: Span
    length_in: int
    inner: tuple[Step, ...] = ()


def _flat(layers: nn.Module) -> list[nn.Module]:
    out: list[nn.Module] = []
    for m in layers.children():
        if isinstance(m, DecoderBlock):
            out += _flat(m.block)
        else:
            out.append(m)
    return out


def _length_out(m: nn.Module, n: int) -> int:
    if isinstance(m, WNConv1d) and m.transpose:
        k = m.weight().shape[-1]
        return (n - 1) * m.stride - 2 * m.padding + k + m.output_padding
    if isinstance(m, WNConv1d):
        k = m.weight().shape[-1]
        return n + 2 * m.padding - m.dilation * (k - 1)
    return n


def _read(m: nn.Module, make: Span, n: int) -> Span:
    """The input span of a layer with input length ``n`` that output span ``make`` needs."""
    a, b = make
    if isinstance(m, WNConv1d) and m.transpose:
        r, p, k = m.stride, m.padding, m.weight().shape[-1]
        lo = -((-(a + p - k + 1)) // r)  # ceil
        return max(0, lo), min(n, (b - 1 + p) // r + 1)
    if isinstance(m, WNConv1d):
        p, k, d = m.padding, m.weight().shape[-1], m.dilation
        return max(0, a - p), min(n, b - p + (k - 1) * d)
    return a, b


def _supported(m: nn.Module) -> bool:
    if isinstance(m, WNConv1d):
        return m.stride == 1 or (m.transpose and m.output_padding == 0 and m.dilation == 1)
    return isinstance(m, (Snake1d, nn.Tanh, NoiseBlock, ResidualUnit))


def _plan(layers: list[nn.Module], make: Span, n: int) -> tuple[Step, ...] | None:
    lengths = [n]
    for m in layers:
        lengths.append(_length_out(m, lengths[-1]))
    steps: list[Step] = []
    for i in range(len(layers) - 1, -1, -1):
        m = layers[i]
        if not _supported(m):
            return None
        if isinstance(m, ResidualUnit):
            inner = _plan(list(m.block.children()), make, lengths[i])
            if inner is None or lengths[i + 1] != lengths[i]:
                return None
            read = (min(inner[0].read[0], make[0]), max(inner[0].read[1], make[1]))
            steps.append(Step(m, read, make, lengths[i], inner))
        else:
            read = _read(m, make, lengths[i])
            steps.append(Step(m, read, make, lengths[i]))
        make = steps[-1].read
    return tuple(reversed(steps))


def noise_lengths(decoder: nn.Module, latent_length: int) -> tuple[int, ...]:
    """The input length of each `NoiseBlock` of a decode of ``latent_length`` latent steps, in
    order: each draws noise that long (the whole window's, in a span decode too)."""
    out: list[int] = []
    n = latent_length
    for m in _flat(cast(nn.Module, decoder.model)):
        if isinstance(m, NoiseBlock):
            out.append(n)
        n = _length_out(m, n)
    return tuple(out)


def plan_span(decoder: nn.Module, latent_length: int, span: Span) -> tuple[Step, ...] | None:
    """The steps that compute output samples ``span`` of a decode of ``latent_length`` latent
    steps, or None when a layer is of a kind this module does not know (decode it whole).
    Planned once per decoder, length and span (kept in a plain attribute of the decoder)."""
    plans = decoder.__dict__.setdefault("_span_plans", {})
    key = (latent_length, span)
    if key not in plans:
        plans[key] = _plan(_flat(cast(nn.Module, decoder.model)), span, latent_length)
    return plans[key]


def conv_geometry(m: WNConv1d, s: Step) -> tuple[int, int]:
    """How step ``s`` runs convolution ``m`` on its input span: a transposed one, its padding
    and the offset of the span's first sample in its output (``(padding, start)``); another,
    the zeros it pads on the left and the right, only past the window's edges."""
    (ia, ib), (a, b) = s.read, s.make
    if m.transpose:
        if (ia, ib) == (0, s.length_in):  # the whole input: the whole decode's own call
            return m.padding, a
        return 0, a - (ia * m.stride - m.padding)  # y's first sample sits at ia·stride - pad
    k, d, p = m.weight().shape[-1], m.dilation, m.padding
    return ia - (a - p), (b - p + (k - 1) * d) - ib


def _conv(m: WNConv1d, x: torch.Tensor, s: Step) -> torch.Tensor:
    w = m.weight()
    if m.transpose:
        pad, lo = conv_geometry(m, s)
        y = conv_transpose1d(x, w, m.bias, m.stride, pad, 0, m.groups)
        return y[..., lo : lo + s.make[1] - s.make[0]]
    return conv1d(x, w, m.bias, conv_geometry(m, s), m.dilation, m.groups)


def _run(steps: tuple[Step, ...], x: torch.Tensor) -> torch.Tensor:
    for s in steps:
        m = s.layer
        if isinstance(m, WNConv1d):
            x = _conv(m, x, s)
        elif isinstance(m, NoiseBlock):
            b = x.shape[0]
            noise = draw_noise(m.generator, (b, 1, s.length_in), x)
            x = x + noise[..., s.make[0] : s.make[1]] * m.linear(x)
        elif isinstance(m, ResidualUnit):
            inner = s.inner[0].read
            y = _run(s.inner, x[..., inner[0] - s.read[0] : inner[1] - s.read[0]])
            x = x[..., s.make[0] - s.read[0] : s.make[1] - s.read[0]] + y
        else:
            x = m(x)
    return x


def decode_span(decoder: nn.Module, z: torch.Tensor, span: Span) -> torch.Tensor:
    """``decoder(z)[..., span[0]:span[1]]``, computing only what that span needs (the module
    docstring); ``z`` the latent ``[B, latent, T]``."""
    steps = plan_span(decoder, z.shape[-1], span)
    if steps is None:
        return decoder(z)[..., span[0] : span[1]]
    ia, ib = steps[0].read
    return _run(steps, z[..., ia:ib])
