"""`snac_span.decode_span`: SNAC's decoder computed for one span of its output equals the whole
decode's samples there (to float rounding; bit for bit when the span is the whole output),
draws the same noise, and reads only what the span needs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from wgc_models.layers.random_init import init_seeded
from wgc_models.orpheus.config import TINY_SNAC
from wgc_models.orpheus.snac import SnacDecoder, WNConv1d
from wgc_models.orpheus.snac_span import plan_span

SPF = TINY_SNAC.samples_per_frame  # 2048
FRAMES = 4  # an Orpheus window


@pytest.fixture(scope="module")
def snac() -> SnacDecoder:
    model = SnacDecoder(TINY_SNAC)
    init_seeded(model, 0)
    return model.eval()


def codes(batch: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = FRAMES * TINY_SNAC.vq_strides[0]
    return [
        torch.randint(0, TINY_SNAC.codebook_size, (batch, n // s), generator=g)
        for s in TINY_SNAC.vq_strides
    ]


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


@pytest.mark.parametrize(
    "span",
    [(SPF, 2 * SPF), (0, 100), (FRAMES * SPF - 77, FRAMES * SPF), (3000, 3001), (1, 8191)],
)
@pytest.mark.parametrize("batch", [1, 2])
def test_a_span_equals_the_whole_decode_there(snac, span, batch) -> None:
    c = codes(batch, seed=span[0] + batch)
    whole = snac.decode(c, gen())
    part = snac.decode(c, gen(), span=span)
    assert part.shape == (batch, 1, span[1] - span[0])
    want = whole[..., span[0] : span[1]]
    assert (part - want).abs().max().item() <= 1e-4
    assert span[1] - span[0] == 1 or want.std().item() > 0.01  # a signal, not silence


def test_the_whole_span_is_the_whole_decode_bit_for_bit(snac) -> None:
    c = codes(1, seed=3)
    assert torch.equal(snac.decode(c, gen(), span=(0, FRAMES * SPF)), snac.decode(c, gen()))


def test_the_noise_is_drawn_as_the_whole_decode_draws_it(snac) -> None:
    c = codes(1, seed=4)
    a, b = gen(), gen()
    snac.decode(c, a)
    snac.decode(c, b, span=(SPF, 2 * SPF))
    assert torch.equal(a.get_state(), b.get_state())  # the same draws: later ones agree too
    other = snac.decode(c, torch.Generator().manual_seed(12), span=(SPF, 2 * SPF))
    assert not torch.equal(other, snac.decode(c, gen(), span=(SPF, 2 * SPF)))  # noise matters


def test_the_last_layers_read_little_more_than_the_span(snac) -> None:
    steps = plan_span(snac.decoder, FRAMES * TINY_SNAC.vq_strides[0], (SPF, 2 * SPF))
    assert steps is not None
    last_conv = [s for s in steps if isinstance(s.layer, WNConv1d)][-1]
    assert last_conv.read == (SPF - 3, 2 * SPF + 3)  # a 7-tap convolution: 3 either side
    transposed = [s for s in steps if isinstance(s.layer, WNConv1d) and s.layer.transpose]
    final = transposed[-1]  # the last upsampling: its input is a quarter of the window and more
    assert final.read[1] - final.read[0] < final.length_in // 2


def test_an_unknown_layer_decodes_the_whole_window(snac) -> None:
    model = SnacDecoder(TINY_SNAC)
    model.load_state_dict(snac.state_dict())
    model.eval()
    model.decoder.model.append(nn.Identity())  # a layer kind the span planner does not know
    assert plan_span(model.decoder, 16, (SPF, 2 * SPF)) is None
    c = codes(1, seed=5)
    want = snac.decode(c, gen())[..., SPF : 2 * SPF]
    assert torch.equal(model.decode(c, gen(), span=(SPF, 2 * SPF)), want)


def test_snake_without_autograd_is_the_same_arithmetic() -> None:
    """`Snake1d` in inference works in one buffer: the same operations in the same order as
    with autograd, so bit for bit the same."""
    from wgc_models.orpheus.snac import Snake1d

    m = Snake1d(8)
    nn.init.uniform_(m.alpha, 0.2, 3.0)
    x = torch.randn(2, 8, 1000, generator=torch.Generator().manual_seed(0)) * 3
    with torch.enable_grad():
        tracked = m(x)
    with torch.inference_mode():
        plain = m(x)
    assert tracked.requires_grad and torch.equal(tracked.detach(), plain)
