"""Noise drawn ahead: a SNAC window's noise drawn before the window fills (`OrpheusVocoder`'s
``window_noise``, handed to a decode as a `DrawnNoise`) gives bit for bit the audio the window's
generator gives it at decode time, in a batch or alone; `NoiseAhead` draws requests' windows
round robin, earliest first, within its limit, hands each over once and only for its seed, and
never draws a window that was decoded already."""

from __future__ import annotations

import pytest
import torch

from tests.unit import test_conv1d as shared
from wgc_models.orpheus.config import TINY_SNAC
from wgc_models.orpheus.model import WINDOW_FRAMES, NoiseAhead, OrpheusVocoder
from wgc_models.orpheus.snac import DrawnNoise, draw_noise

LATENT = WINDOW_FRAMES * TINY_SNAC.vq_strides[0]
vocoder = shared.vocoder  # the tiny vocoder (a module fixture), and valid windows
windows = shared.windows


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("span", [None, (2048, 4096)])
def test_a_window_noise_is_what_its_decode_draws(vocoder, span) -> None:
    lengths = vocoder.snac.noise_lengths(LATENT)
    assert len(lengths) == len(TINY_SNAC.decoder_rates)  # one noise block per upsampling
    drawn = vocoder.window_noise(gen(7))
    assert [t.shape[-1] for t in drawn] == list(lengths)
    again = gen(7)  # in this order the generator gives exactly these tensors
    assert all(torch.equal(t, torch.randn(t.shape, generator=again)) for t in drawn)
    # a decode (whole, or of the kept span) asks for exactly these draws, in this order
    codes = [torch.randint(0, 64, (1, LATENT // s), generator=gen(1)) for s in TINY_SNAC.vq_strides]
    replay = DrawnNoise(drawn)
    got = vocoder.snac.decode(codes, [replay], span=span)
    assert replay._next == len(drawn)  # every draw taken, none asked beyond them
    assert torch.equal(got, vocoder.snac.decode(codes, [gen(7)], span=span))


@pytest.mark.parametrize("batch", [1, 3])
def test_windows_with_noise_drawn_ahead_decode_bit_for_bit_alike(vocoder, batch) -> None:
    ws = windows(batch, seed=batch)
    want = vocoder.windows(ws, [gen(100 + i) for i in range(batch)])
    ahead = [DrawnNoise(vocoder.window_noise(gen(100 + i))) for i in range(batch)]
    mixed: list[torch.Generator | DrawnNoise] = list(ahead)
    if batch > 1:  # rows drawn ahead and rows drawing at decode time, in one batch
        mixed[1] = gen(101)
    got = vocoder.windows(ws, mixed)
    for a, b in zip(got, want, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)


def test_drawn_noise_is_used_up_and_checks_what_it_is_asked_for(vocoder) -> None:
    drawn = vocoder.window_noise(gen(3))
    like = torch.zeros(1)
    one = DrawnNoise(drawn)
    with pytest.raises(ValueError, match="asked for"):
        one.take((1, 1, drawn[0].shape[-1] + 1), like)
    for t in drawn:
        assert one.take(tuple(t.shape), like) is t
    with pytest.raises(ValueError, match="asked for more"):
        one.take(tuple(drawn[0].shape), like)
    with pytest.raises(ValueError, match="float64"):
        DrawnNoise(drawn).take(tuple(drawn[0].shape), like.double())


def test_draw_noise_with_a_span_is_that_span_of_the_whole_draw() -> None:
    like = torch.zeros(1)
    whole = draw_noise([gen(1), gen(2)], (2, 1, 40), like)
    part = draw_noise([gen(1), gen(2)], (2, 1, 40), like, (5, 17))
    assert part.is_contiguous() and torch.equal(part, whole[..., 5:17])
    one = draw_noise(gen(4), (2, 1, 40), like, (5, 17))
    assert torch.equal(one, torch.randn((2, 1, 40), generator=gen(4))[..., 5:17])


def draw_all(ahead: NoiseAhead) -> None:
    while ahead.step():
        continue


def _ahead(limit: int = 32) -> tuple[NoiseAhead, list[int]]:
    seeds: list[int] = []

    def draw(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        t = torch.randn(2, generator=g)
        seeds.append(int(g.initial_seed()))
        return (t,)

    return NoiseAhead(draw, limit=limit), seeds


def test_requests_are_drawn_round_robin_earliest_windows_first() -> None:
    ahead, seeds = _ahead()
    ahead.expect("a", 100, 3)
    ahead.expect("b", 200, 2)
    ahead.expect("a", 999, 9)  # once per request: a second note changes nothing
    draw_all(ahead)
    assert seeds == [100, 200, 101, 201, 102]
    assert ahead.drawn == 5 and ahead.held() == 5
    got = ahead.take("a", 100, 0)
    assert got is not None
    assert torch.equal(got.take((2,), torch.zeros(1)), torch.randn(2, generator=gen(100)))
    assert ahead.take("a", 100, 0) is None  # handed over once
    assert ahead.take("b", 201, 0) is None  # another seed: the caller draws its own
    assert ahead.used == 1


def test_a_window_decoded_first_is_never_drawn_and_older_ones_go() -> None:
    ahead, seeds = _ahead()
    ahead.expect("a", 10, 5)
    assert ahead.step() and seeds == [10]
    assert ahead.take("a", 10, 2) is None  # window 2 decoded before it was drawn
    assert ahead.held() == 0  # window 0's draw is stale: windows decode in order
    draw_all(ahead)
    assert seeds == [10, 13, 14]


def test_the_limit_bounds_what_a_request_holds_and_drop_frees_it() -> None:
    ahead, seeds = _ahead(limit=4)
    ahead.expect("a", 0, 50)
    ahead.expect("none", 0, 0)  # fills no window
    draw_all(ahead)
    assert seeds == [0, 1, 2, 3] and ahead.held() == 4
    ahead.drop("a")
    assert ahead.held() == 0 and ahead.take("a", 0, 0) is None
    ahead.expect("b", 0, 2)
    ahead.drop("b")  # dropped before its turn: nothing is drawn for it
    assert not ahead.step()


def test_windows_of_counts_the_sliding_windows() -> None:
    assert [OrpheusVocoder.windows_of(n) for n in (0, 27, 28, 34, 35, 140)] == [0, 0, 1, 1, 2, 17]
