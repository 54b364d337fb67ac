"""SNAC's span decode (`wgc_models.orpheus.snac_span`) as one compiled program: what a CPU
deployment whose placement says ``batching.backend: inductor`` runs its vocoder windows with.

At the tiny sizes a window's decode is ~800 small dispatched operations (the `Snake1d` s'
``sin``, the depthwise taps, the overlap-adds), each a pass over a few thousand samples;
inductor fuses the pointwise runs between the matrix products into C++ loops (a batch of 16
Orpheus windows: ~9-11 ms against ~20 eager, on one core). `SpanProgram` is the plan's steps
flattened into a function of plain tensors (the weights folded once, each `NoiseBlock`'s noise
an argument, drawn by the caller from each row's generator exactly as the eager decode draws
it), which dynamo traces whole (``fullgraph``); `CompiledSpan` compiles it, behind the
codebooks' lookup (the codes' latent from tables folded once), with the batch
dimension symbolic (`wgc_runtime.engines.capture.inductor.CompiledRows`: one artifact for one
row, one for any larger batch).

Two properties, both tested (`tests/unit/test_snac_compiled.py`): the program equals the eager
span decode to float rounding (inductor's fused loops round differently from the dispatched ops:
within 2e-4, 7.5e-5 at most on the tiny model's windows; not bit for bit), and it stays batch-
invariant: every row of a batch is bit for bit that row decoded alone, at every batch size and
slot. That second one is what the tests observe of inductor's code for this program (its loops
keep a row's arithmetic the same whatever the batch; the matrix products are the per-row ones of
`wgc_models.orpheus.conv1d`), not something inductor promises: a torch upgrade that changed
it would fail those tests, not pass silently. A window's audio therefore does not depend on
which other requests' windows shared its batch, in a compiled deployment as in an eager one; the
two kinds of deployment differ from each other by that rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from wgc_models.orpheus.conv1d import conv1d, conv_transpose1d
from wgc_models.orpheus.snac import (
    Codebook,
    Noise,
    NoiseBlock,
    ResidualUnit,
    Snake1d,
    WNConv1d,
    draw_noise,
)
from wgc_models.orpheus.snac_span import Span, Step, conv_geometry, plan_span

Op = Callable[[torch.Tensor, Sequence[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True, slots=True)
class NoiseSlot:
    """A `NoiseBlock`'s noise: drawn ``[B, 1, length]`` (the whole window's, as the eager decode
    draws it), of which ``[start, end)`` is used."""

    length: int
    start: int
    end: int


class SpanProgram:
    """`plan_span`'s steps of one (latent length, span) as a function of tensors:
    ``program(z, noises)`` with ``z`` the latent ``[B, latent, T]`` and ``noises`` one
    ``[B, 1, end - start]`` tensor per `NoiseSlot` (`slots`), in order."""

    def __init__(self, steps: tuple[Step, ...]):
        self.slots: list[NoiseSlot] = []
        self.read = steps[0].read
        self._ops = self._build(steps)

    def __call__(self, z: torch.Tensor, noises: Sequence[torch.Tensor]) -> torch.Tensor:
        x = z[..., self.read[0] : self.read[1]]
        for op in self._ops:
            x = op(x, noises)
        return x

    def _build(self, steps: tuple[Step, ...]) -> list[Op]:
        return [self._op(s) for s in steps]

    def _op(self, s: Step) -> Op:
        m = s.layer
        if isinstance(m, WNConv1d):
            return _conv_op(m, s)
        if isinstance(m, Snake1d):
            alpha = m.alpha.detach().clone()
            inv = (alpha + 1e-9).reciprocal()
            return lambda x, _n: x + torch.sin(alpha * x).square() * inv
        if isinstance(m, NoiseBlock):
            k = len(self.slots)
            self.slots.append(NoiseSlot(s.length_in, *s.make))
            w = m.linear.weight().detach().clone()
            return lambda x, n: x + n[k] * conv1d(x, w)
        if isinstance(m, ResidualUnit):
            inner = self._build(s.inner)
            (ia, ib), lo = s.inner[0].read, s.read[0]
            a, b = s.make[0] - lo, s.make[1] - lo

            def residual(x: torch.Tensor, n: Sequence[torch.Tensor]) -> torch.Tensor:
                y = x[..., ia - lo : ib - lo]
                for op in inner:
                    y = op(y, n)
                return x[..., a:b] + y

            return residual
        if isinstance(m, nn.Tanh):
            return lambda x, _n: torch.tanh(x)
        raise TypeError(f"no compiled form of {type(m).__name__}")  # plan_span refuses them


def _conv_op(m: WNConv1d, s: Step) -> Op:
    """`snac_span._conv` with the weight folded and every offset a constant
    (`snac_span.conv_geometry`)."""
    w = m.weight().detach().clone()
    bias = None if m.bias is None else m.bias.detach().clone()
    if m.transpose:
        stride, (pad, lo) = m.stride, conv_geometry(m, s)
        hi = lo + s.make[1] - s.make[0]
        groups = m.groups
        # a short input with many taps (the first upsampling): the products as xᵀ · W
        first = s.read[1] - s.read[0] < w.shape[1] * w.shape[2] // 8
        return lambda x, _n: conv_transpose1d(x, w, bias, stride, pad, 0, groups, first)[..., lo:hi]
    pads, d, groups = conv_geometry(m, s), m.dilation, m.groups
    return lambda x, _n: conv1d(x, w, bias, pads, d, groups)


REALIZE_OPCOUNT = 4  # measured 3-6 alike; inductor's CPU default (50) recomputes the snakes


class CompiledSpan:
    """A decoder's span decode at one latent length, compiled (module docstring), from the
    codes: `decode_codes` takes what `SnacDecoder.decode` takes, and the noise generators. The
    program starts from each codebook's projected table (``out_proj`` of every code, folded
    once, like the weights), so a window's latent is gathers and a sum inside the program, not
    each codebook's embedding and projection run op by op before it (~1 ms of a 16-window
    batch here)."""

    def __init__(
        self,
        decoder: nn.Module,
        quantizer: Sequence[Codebook],
        latent_length: int,
        span: Span,
        label: str,
    ):
        from wgc_runtime.engines.capture.inductor import CompiledRows

        steps = plan_span(decoder, latent_length, span)
        if steps is None:
            raise ValueError("this decoder has a layer the span decode does not know")
        self.latent_length, self.span = latent_length, span
        self.program = SpanProgram(steps)
        with torch.inference_mode():  # per codebook: [codes, latent], and its repeat
            self.tables = [
                (cb.out_proj(cb.codebook.weight.t()[None])[0].t().contiguous(), cb.stride)
                for cb in quantizer
            ]
        # the snake activations are stored once, not recomputed in each of a kernel-7
        # convolution's taps: a 16-window batch ~6 ms instead of ~8-9 (`CompiledRows`), the
        # same samples bit for bit
        self._run = CompiledRows(self._call, label, realize_opcount=REALIZE_OPCOUNT)
        self.runs = 0  # decodes run (the tests check windows take this path)

    def _call(self, *args: torch.Tensor) -> torch.Tensor:
        n = len(self.tables)
        z = sum(
            table[c].transpose(1, 2).repeat_interleave(stride, dim=-1)
            for (table, stride), c in zip(self.tables, args[:n], strict=True)
        )
        return self.program(cast(torch.Tensor, z), args[n:])

    def decode_codes(self, codes: Sequence[torch.Tensor], generator: Noise) -> torch.Tensor:
        """Samples ``span`` of the decode of ``codes`` (``codes[i]`` ``[B, latent_length /
        vq_strides[i]]``)."""
        like = self.tables[0][0]
        rows = [c.long().contiguous() for c in codes]
        b = rows[0].shape[0]
        noises = [
            draw_noise(generator, (b, 1, slot.length), like, (slot.start, slot.end))
            for slot in self.program.slots
        ]
        self.runs += 1
        return self._run(*rows, *noises)
