"""`components.conv1d`: the vocoders' convolutions equal ``torch.nn.functional``'s to float
rounding, and every row of a batch is bit for bit the row computed alone (batch-invariant), at
one and two intra-op threads; SNAC's window decode built on them is batch-invariant too, noise
and all (`OrpheusVocoder.windows`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from wgc_models.layers.random_init import init_seeded
from wgc_models.orpheus import conv1d as K
from wgc_models.orpheus.config import TINY_SNAC, TINY_TOKENS
from wgc_models.orpheus.model import OrpheusVocoder
from wgc_models.orpheus.snac import SnacDecoder

BATCHES = (1, 2, 3, 7, 16)


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def invariant(fn, x: torch.Tensor) -> None:
    whole = fn(x)
    for b in BATCHES:
        assert torch.equal(fn(x[:b]), whole[:b]), b
    for i in (0, 5, x.shape[0] - 1):  # a row's slot does not matter either
        assert torch.equal(fn(x[i : i + 1])[0], whole[i]), i


CONVS = [  # (channels in, out, length, kernel, dilation, groups, padding)
    (4, 4, 2132, 1, 1, 1, 0),  # pointwise
    (4, 4, 2131, 7, 9, 4, 27),  # depthwise, dilated, odd length
    (8, 8, 1146, 7, 3, 8, (2, 11)),  # depthwise, uneven zeros
    (4, 1, 2054, 7, 1, 1, 3),  # the output convolution
    (64, 64, 16, 7, 1, 1, 3),  # a full kernel
    (8, 64, 5, 1, 1, 1, 0),  # a codebook's projection
]


@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "x".join(map(str, s[:5])))
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d_equals_functional_and_is_batch_invariant(threads, shape, bias) -> None:
    cin, cout, n, k, d, g, pad = shape
    x, w = rand(16, cin, n, seed=n), rand(cout, cin // g, k, seed=k) / (cin // g * k) ** 0.5
    b = rand(cout, seed=1) if bias else None
    lr = (pad, pad) if isinstance(pad, int) else pad
    want = F.conv1d(F.pad(x, lr), w, b, 1, 0, d, g)
    got = K.conv1d(x, w, b, pad, d, g)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-5
    invariant(lambda t: K.conv1d(t, w, b, pad, d, g), x)


def test_a_grouped_convolution_falls_back_to_functional() -> None:
    x, w = rand(3, 8, 50, seed=0), rand(8, 2, 5, seed=1)  # 4 groups of 2 channels
    assert torch.equal(K.conv1d(x, w, None, 2, 1, 4), F.conv1d(x, w, None, 1, 2, 1, 4))
    with pytest.raises(ValueError, match="7 taps"):
        K.conv1d(rand(1, 4, 3, seed=0), rand(4, 4, 7, seed=1))


@pytest.mark.parametrize(
    "shape",  # (in, out, length, stride, padding, output padding)
    [(64, 32, 15, 8, 4, 0), (16, 8, 288, 4, 2, 0), (8, 4, 1067, 2, 1, 0), (8, 4, 5, 2, 0, 1)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("steps_first", [False, True], ids=["Wt.x", "xt.W"])
def test_conv_transpose1d_equals_functional_and_is_batch_invariant(
    threads, shape, steps_first
) -> None:
    cin, cout, n, r, p, op = shape
    x, b = rand(16, cin, n, seed=n), rand(cout, seed=2)
    w = rand(cin, cout, 2 * r, seed=r) / cin**0.5
    want = F.conv_transpose1d(x, w, b, r, p, op)
    got = K.conv_transpose1d(x, w, b, r, p, op, steps_first=steps_first)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-5
    invariant(lambda t: K.conv_transpose1d(t, w, b, r, p, op, steps_first=steps_first), x)


def test_a_transposed_kernel_off_the_stride_falls_back_to_functional() -> None:
    x, w = rand(2, 4, 9, seed=0), rand(4, 3, 5, seed=1)
    assert torch.equal(K.conv_transpose1d(x, w, None, 2, 1), F.conv_transpose1d(x, w, None, 2, 1))


@pytest.fixture(scope="module")
def vocoder() -> OrpheusVocoder:
    snac = SnacDecoder(TINY_SNAC)
    init_seeded(snac, 0)
    return OrpheusVocoder(snac.eval(), TINY_TOKENS)


def windows(n: int, seed: int) -> list[torch.Tensor]:
    """``n`` windows of valid audio tokens (28 each, starting at a frame boundary)."""
    g = torch.Generator().manual_seed(seed)
    tk, pos = TINY_TOKENS, torch.arange(28)
    base = tk.audio_offset + (pos % 7) * tk.codebook_size
    return [base + torch.randint(1, tk.codebook_size, (28,), generator=g) for _ in range(n)]


def noise(keys: list[int]) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(1000 + k) for k in keys]


def test_windows_decoded_together_are_each_what_they_are_alone(threads, vocoder) -> None:
    ws = windows(16, seed=4)
    ws[5] = ws[5].clone()
    ws[5][3] = TINY_TOKENS.audio_offset  # a code out of its position's range: no audio
    alone = [vocoder.window(w, g) for w, g in zip(ws, noise(list(range(16))), strict=True)]
    assert alone[5] is None
    assert all(a is not None and a.std() > 0.01 for i, a in enumerate(alone) if i != 5)
    for b in BATCHES:
        together = vocoder.windows(ws[:b], noise(list(range(b))))
        for i, (t, a) in enumerate(zip(together, alone, strict=False)):
            assert (t is None) == (a is None), (b, i)
            assert t is None or torch.equal(t, a), (b, i)
    # the same window in other company, at another slot: the same samples
    mixed = windows(4, seed=9)
    mixed.insert(2, ws[0])
    got = vocoder.windows(mixed, noise([7, 8, 0, 9, 10]))[2]
    assert got is not None and torch.equal(got, alone[0])


def test_each_window_draws_its_own_noise(vocoder) -> None:
    (w,) = windows(1, seed=2)
    a, b = vocoder.windows([w, w], noise([1, 2]))
    assert a is not None and b is not None and not torch.equal(a, b)
    with pytest.raises(ValueError):
        vocoder.windows([w], noise([1, 2]))
