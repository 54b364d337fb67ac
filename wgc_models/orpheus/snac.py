"""The SNAC decoder (Siuzdak et al., the `snac` package): codes of its coarse-to-fine codebooks
to a waveform, named like ``snac.SNAC``'s state dict so its checkpoints load by name.

``SNAC.decode(codes)`` is ``quantizer.from_codes`` (each codebook's embedding through its
``out_proj``, repeated to the finest rate by its ``vq_stride``, summed) then ``decoder``: a
depthwise + pointwise input convolution, one `DecoderBlock` per ``decoder_rates`` entry
(`Snake1d`, a transposed convolution upsampling by the rate, a `NoiseBlock`, three dilated
`ResidualUnit` s) and `Snake1d` → convolution → ``tanh``. Every convolution is weight-normed
(``parametrizations.weight.original0`` = g, ``original1`` = v, ``w = g · v / ‖v‖`` over all but
dim 0; the legacy ``weight_g`` / ``weight_v`` names load too, see
`wgc_models.orpheus.checkpoint`). Folded weights are cached until a parameter changes.

The 24 kHz model has no local attention (``attn_window_size`` null); a config asking for it is
refused. `NoiseBlock` adds ``randn · conv(x)`` like the package, but draws from the caller's
`torch.Generator` (the package draws from the global one: seed it with the same value and the
draws agree, which the parity test relies on).

Batch-invariant without autograd: the convolutions are `wgc_models.orpheus.conv1d`'s, and
``sin`` / ``tanh`` run row by row on the CPU (`per_row_`), so a row of a batched decode is bit
for bit the row decoded alone, given the same noise (`draw_noise`: one generator per row, as a
streaming vocoder decoding several requests' windows at once passes them). Equal to the
package's decode to float rounding (~1e-6), not bit for bit.

Sizes: one frame of codebook 0 is ``hop · vq_strides[0]`` samples (`SnacConfig.samples_per_frame`,
2048 for the 24 kHz model: hop 512 = 8·8·4·2, stride 4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.orpheus.conv1d import conv1d, conv_transpose1d


@dataclass(frozen=True, slots=True, kw_only=True)
class SnacConfig:
    """``SNAC(**config)``'s arguments (the fields of the package's ``config.json``)."""

    sampling_rate: int = 24000
    encoder_dim: int = 48
    encoder_rates: tuple[int, ...] = (2, 4, 8, 8)
    latent_dim: int | None = None
    decoder_dim: int = 1024
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)
    attn_window_size: int | None = None
    codebook_size: int = 4096
    codebook_dim: int = 8
    vq_strides: tuple[int, ...] = (4, 2, 1)
    noise: bool = True
    depthwise: bool = True
    extra: dict[str, Any] = field(default_factory=dict[str, Any], compare=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SnacConfig:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kw: dict[str, Any] = {
            k: (*v,) if isinstance(v, list) else v for k, v in raw.items() if k in known
        }
        return cls(**kw, extra={k: v for k, v in raw.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        """The keyword arguments of ``snac.SNAC``."""
        out = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "extra"}
        return {k: [*v] if isinstance(v, tuple) else v for k, v in out.items()}

    @property
    def latent(self) -> int:
        return self.latent_dim or self.encoder_dim * 2 ** len(self.encoder_rates)

    @property
    def hop_length(self) -> int:
        return math.prod(self.decoder_rates)

    @property
    def samples_per_frame(self) -> int:
        """Audio samples per code of the coarsest codebook."""
        return self.hop_length * self.vq_strides[0]


class _WeightNorm(nn.Module):
    """The parametrization's parameters: ``original0`` (g) and ``original1`` (v)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.original0 = nn.Parameter(torch.ones(shape[0], *([1] * (len(shape) - 1))))
        self.original1 = nn.Parameter(torch.randn(shape) * 0.02)


class WNConv1d(nn.Module):
    """A weight-normed ``Conv1d`` (or ``ConvTranspose1d`` with ``transpose``)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
        transpose: bool = False,
        output_padding: int = 0,
    ):
        super().__init__()
        shape = (cin, cout // groups, kernel) if transpose else (cout, cin // groups, kernel)
        self.parametrizations = nn.ModuleDict({"weight": _WeightNorm(shape)})
        self.bias = nn.Parameter(torch.zeros(cout)) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.transpose, self.output_padding = transpose, output_padding
        self._folded: tuple[tuple[int, int, int, int, torch.dtype], torch.Tensor] | None = None

    def weight(self) -> torch.Tensor:
        wn = cast(_WeightNorm, self.parametrizations["weight"])
        g, v = wn.original0, wn.original1
        key = (g.data_ptr(), v.data_ptr(), g._version, v._version, g.dtype)
        if self._folded is None or self._folded[0] != key:
            with torch.no_grad():
                norm = cast(torch.Tensor, v.norm(dim=tuple(range(1, v.dim())), keepdim=True))  # pyright: ignore[reportUnknownMemberType] (stub: untyped `p`)
                self._folded = (key, v * (g / norm))
        return self._folded[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution, batch-invariant (`wgc_models.orpheus.conv1d`) where it can be:
        a window's audio is the same whatever else its batch holds."""
        w = self.weight()
        if self.transpose:
            if self.dilation == 1:
                return conv_transpose1d(
                    x, w, self.bias, self.stride, self.padding, self.output_padding, self.groups
                )
            return F.conv_transpose1d(
                x,
                w,
                self.bias,
                self.stride,
                self.padding,
                self.output_padding,
                self.groups,
                self.dilation,
            )
        if self.stride == 1:
            return conv1d(x, w, self.bias, self.padding, self.dilation, self.groups)
        return F.conv1d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Snake1d(nn.Module):
    """``x + sin²(αx) / (α + 1e-9)``, α per channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha
        if torch.is_grad_enabled():
            return torch.addcmul(x, torch.sin(a * x).pow(2), (a + 1e-9).reciprocal())
        # the same function in one buffer (no autograd to keep inputs for): ``sin`` row by
        # row (`per_row_`), the scale and the sum one fused multiply-add
        y = per_row_(torch.Tensor.sin_, torch.mul(a, x)).square_()
        return torch.addcmul(x, y, (a + 1e-9).reciprocal(), out=y)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int, groups: int):
        super().__init__()
        pad = (6 * dilation) // 2
        self.block = nn.Sequential(
            Snake1d(dim),
            WNConv1d(dim, dim, 7, dilation=dilation, padding=pad, groups=groups),
            Snake1d(dim),
            WNConv1d(dim, dim, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        crop = (x.shape[-1] - y.shape[-1]) // 2
        if crop > 0:
            x = x[..., crop:-crop]
        return x + y


class DrawnNoise:
    """One row's noise for one decode, drawn beforehand: the ``[1, 1, T]`` tensors a generator
    gives the decode's `NoiseBlock` s, in their order (`draw`), handed out in that order in the
    generator's place (`take`, through `draw_noise`). A decode given it sees exactly the numbers
    the generator would have given it then. One object serves one decode (it is used up)."""

    def __init__(self, tensors: Sequence[torch.Tensor]):
        self._tensors = list(tensors)
        self._next = 0

    @classmethod
    def draw(
        cls,
        generator: torch.Generator,
        lengths: Sequence[int],
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> tuple[torch.Tensor, ...]:
        """The draws of a decode whose noise blocks see ``lengths`` samples (`noise_lengths`),
        as `draw_noise` makes them from ``generator``: make a `DrawnNoise` of them."""
        return tuple(
            torch.randn((1, 1, n), generator=generator, device=device, dtype=dtype) for n in lengths
        )

    def take(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """The next draw, which must be of ``shape`` with ``like``'s dtype and device."""
        if self._next >= len(self._tensors):
            raise ValueError(f"noise drawn for {len(self._tensors)} noise blocks, asked for more")
        t = self._tensors[self._next]
        if tuple(t.shape) != tuple(shape) or t.dtype != like.dtype or t.device != like.device:
            raise ValueError(
                f"noise drawn as {tuple(t.shape)} {t.dtype} on {t.device}, asked for "
                f"{tuple(shape)} {like.dtype} on {like.device}"
            )
        self._next += 1
        return t


# one generator for the batch, or one per row (or a row's noise drawn beforehand)
Noise = torch.Generator | Sequence[torch.Generator | DrawnNoise] | None


def draw_noise(
    generator: Noise,
    shape: tuple[int, int, int],
    like: torch.Tensor,
    span: tuple[int, int] | None = None,
) -> torch.Tensor:
    """``randn(shape)``: from one generator (or the global one) as one draw, or with one
    generator per row, each row's ``[1, 1, T]`` from its own (a row then gets the noise it would
    get decoded alone), or from its `DrawnNoise`. With ``span`` only samples ``[start, end)``
    of that draw, contiguous (the whole ``T`` is drawn all the same)."""
    a, b = span if span is not None else (0, shape[-1])
    if generator is None or isinstance(generator, torch.Generator):
        out = torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)
        return out if span is None else out[..., a:b].contiguous()
    if len(generator) != shape[0]:
        raise ValueError(f"{len(generator)} noise generators for {shape[0]} rows")
    one = (1, *shape[1:])
    rows = [
        (
            g.take(one, like)
            if isinstance(g, DrawnNoise)
            else torch.randn(one, generator=g, device=like.device, dtype=like.dtype)
        )[..., a:b]
        for g in generator
    ]
    return torch.cat(rows)


def per_row_(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn`` (an in-place elementwise op) on each row of contiguous ``x`` by itself: a
    transcendental's vectorised and scalar paths may differ in the last bit, and which elements
    take which depends on the tensor's size, so row by row every row is computed as it would be
    alone (see `wgc_models.orpheus.conv1d`). On a GPU every element runs the same code
    wherever it sits, so the op runs once over the batch."""
    x = x.contiguous()
    if x.device.type != "cpu":
        fn(x)
        return x
    for row in x:
        fn(row)
    return x


class NoiseBlock(nn.Module):
    """``x + randn[B, 1, T] · conv(x)``; the noise comes from `generator` (`draw_noise`)."""

    generator: Noise = None  # set by `SnacDecoder.decode` around a call

    def __init__(self, dim: int):
        super().__init__()
        self.linear = WNConv1d(dim, dim, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, t = x.shape
        return x + draw_noise(self.generator, (b, 1, t), x) * self.linear(x)


class Tanh(nn.Tanh):
    """``tanh``, row by row without autograd (`per_row_`)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return torch.tanh(input)
        return per_row_(torch.Tensor.tanh_, input.clone(memory_format=torch.contiguous_format))


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, noise: bool, groups: int):
        super().__init__()
        layers: list[nn.Module] = [
            Snake1d(cin),
            WNConv1d(
                cin,
                cout,
                2 * stride,
                stride=stride,
                padding=math.ceil(stride / 2),
                transpose=True,
                output_padding=stride % 2,
            ),
        ]
        if noise:
            layers.append(NoiseBlock(cout))
        layers += [ResidualUnit(cout, d, groups) for d in (1, 3, 9)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Decoder(nn.Module):
    """``snac.layers.Decoder`` (latent → waveform ``[B, 1, T·hop]``)."""

    def __init__(self, cfg: SnacConfig):
        super().__init__()
        lat, ch = cfg.latent, cfg.decoder_dim
        if cfg.depthwise:
            layers: list[nn.Module] = [
                WNConv1d(lat, lat, 7, padding=3, groups=lat),
                WNConv1d(lat, ch, 1),
            ]
        else:
            layers = [WNConv1d(lat, ch, 7, padding=3)]
        out = ch
        for i, stride in enumerate(cfg.decoder_rates):
            cin, out = ch // 2**i, ch // 2 ** (i + 1)
            groups = out if cfg.depthwise else 1
            layers.append(DecoderBlock(cin, out, stride, cfg.noise, groups))
        layers += [Snake1d(out), WNConv1d(out, 1, 7, padding=3), Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z)


class Codebook(nn.Module):
    """One codebook's decoding half: ``codebook`` embedding and ``out_proj``."""

    def __init__(self, cfg: SnacConfig, stride: int):
        super().__init__()
        self.stride = stride
        self.codebook = nn.Embedding(cfg.codebook_size, cfg.codebook_dim)
        self.out_proj = WNConv1d(cfg.codebook_dim, cfg.latent, 1)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        z = self.out_proj(self.codebook(codes).transpose(1, 2))
        return z.repeat_interleave(self.stride, dim=-1)


class _Quantizer(nn.Module):
    def __init__(self, cfg: SnacConfig):
        super().__init__()
        self.quantizers = nn.ModuleList(Codebook(cfg, s) for s in cfg.vq_strides)


class SnacDecoder(nn.Module):
    """The decoding half of ``snac.SNAC``: `decode` maps codes to audio."""

    def __init__(self, cfg: SnacConfig):
        super().__init__()
        if cfg.attn_window_size is not None:
            raise ValueError("SNAC with local attention (`attn_window_size`) is not supported")
        self.config = cfg
        self.quantizer = _Quantizer(cfg)
        self.decoder = Decoder(cfg)

    @torch.inference_mode()
    def decode(
        self,
        codes: list[torch.Tensor],
        generator: Noise = None,
        span: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """``codes[i]`` ``[B, n · vq_strides[0] / vq_strides[i]]`` → audio ``[B, 1, n · spf]``;
        with ``span`` only those samples ``[B, 1, span[1] - span[0]]``, computing only what they
        need (`wgc_models.orpheus.snac_span`)."""
        from wgc_models.orpheus.snac_span import decode_span

        if span is not None:
            latent = codes[0].shape[-1] * self.config.vq_strides[0]
            compiled = self.compiled_spans.get((latent, span))
            if compiled is not None:  # the codebooks are in the program
                return compiled.decode_codes(codes, generator)
        z = sum(q(c.long()) for q, c in zip(self.quantizer.quantizers, codes, strict=True))
        assert isinstance(z, torch.Tensor)
        blocks = self._noise_blocks()
        for b in blocks:
            b.generator = generator
        try:
            return self.decoder(z) if span is None else decode_span(self.decoder, z, span)
        finally:
            for b in blocks:
                b.generator = None

    def compile_span(self, latent_length: int, span: tuple[int, int]) -> None:
        """From now on `decode` computes ``span`` of a decode of ``latent_length`` latent steps
        with one compiled program (`wgc_models.orpheus.snac_compiled`: inductor on the CPU,
        compiled at its first two calls, of one row and of several). The program holds the
        weights as they are now (folded once): compile after loading them."""
        from wgc_models.orpheus.snac_compiled import CompiledSpan

        label = f"snac_{latent_length}_{span[0]}_{span[1]}"
        self.compiled_spans[(latent_length, span)] = CompiledSpan(
            self.decoder, self.codebooks(), latent_length, span, label
        )

    def codebooks(self) -> list[Codebook]:
        """The codebooks' decoding halves, coarsest first."""
        return [cast(Codebook, q) for q in self.quantizer.quantizers]

    @property
    def compiled_spans(self) -> dict[tuple[int, tuple[int, int]], Any]:
        """The compiled span decodes (`compile_span`) by (latent length, span)."""
        return self.__dict__.setdefault("_compiled_spans", {})  # a plain attribute, no module

    def noise_lengths(self, latent_length: int) -> tuple[int, ...]:
        """What each `NoiseBlock` of a decode of ``latent_length`` latent steps draws, in order
        (a whole decode's and a span decode's draws alike: `snac_span`): for `DrawnNoise.draw`."""
        from wgc_models.orpheus.snac_span import noise_lengths

        return noise_lengths(self.decoder, latent_length)

    def _noise_blocks(self) -> list[NoiseBlock]:
        found = self.__dict__.get("_noise")
        if found is None:  # a plain attribute, not a submodule: looked up once
            found = self.__dict__["_noise"] = [
                m for m in self.decoder.modules() if isinstance(m, NoiseBlock)
            ]
        return found
