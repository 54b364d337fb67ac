"""`snac_compiled`: SNAC's span decode as one compiled program equals the eager span decode to
float rounding, draws the noise the eager one draws, and stays batch-invariant (every row of
every batch size, at any slot, bit for bit the row decoded alone), so a compiled deployment's
window audio does not depend on its batch-mates either. `SpanProgram` uncompiled is the same
function too (the tests of the program itself, without inductor's time)."""

from __future__ import annotations

import random

import pytest
import torch

from wgc_models.layers.random_init import init_seeded
from wgc_models.orpheus.config import TINY_SNAC, TINY_TOKENS
from wgc_models.orpheus.model import FRAME, WINDOW_FRAMES, OrpheusVocoder
from wgc_models.orpheus.snac import SnacDecoder
from wgc_models.orpheus.snac_compiled import REALIZE_OPCOUNT, SpanProgram
from wgc_models.orpheus.snac_span import plan_span
from wgc_runtime.engines.capture import inductor_available

SPF = TINY_SNAC.samples_per_frame
SPAN = (SPF, 2 * SPF)  # what an Orpheus window keeps
LATENT = WINDOW_FRAMES * TINY_SNAC.vq_strides[0]
NO_INDUCTOR = inductor_available()


def model(seed: int = 0) -> SnacDecoder:
    m = SnacDecoder(TINY_SNAC)
    init_seeded(m, seed)
    return m.eval()


def windows(n: int, seed: int) -> list[torch.Tensor]:
    rng = random.Random(seed)
    return [
        torch.tensor(
            [
                TINY_TOKENS.audio_token(p, rng.randrange(1, TINY_SNAC.codebook_size))
                for p in range(WINDOW_FRAMES * FRAME)
            ]
        )
        for _ in range(n)
    ]


def noise(rows) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(1000 + i) for i in rows]


def test_the_program_uncompiled_is_the_span_decode() -> None:
    snac = model()
    g = torch.Generator().manual_seed(5)
    codes = [
        torch.randint(0, TINY_SNAC.codebook_size, (3, LATENT // s), generator=g)
        for s in TINY_SNAC.vq_strides
    ]
    with torch.inference_mode():
        z = sum(q(c) for q, c in zip(snac.quantizer.quantizers, codes, strict=True))
        assert isinstance(z, torch.Tensor)
        steps = plan_span(snac.decoder, LATENT, SPAN)
        assert steps is not None
        program = SpanProgram(steps)
        assert len(program.slots) == len(TINY_SNAC.decoder_rates)  # one per noise block
        # each row's generator draws the whole window's noise of each block, in block order
        gens = noise(range(3))
        per_row = [
            [torch.randn((1, 1, s.length), generator=gi) for s in program.slots] for gi in gens
        ]
        drawn = [
            torch.cat([per_row[r][k] for r in range(3)])[..., s.start : s.end]
            for k, s in enumerate(program.slots)
        ]
        got = program(z, drawn)
    want = snac.decode(codes, noise(range(3)), span=SPAN)
    assert got.shape == want.shape == (3, 1, SPAN[1] - SPAN[0])
    assert (got - want).abs().max().item() <= 2e-4
    assert want.std().item() > 0.01


@pytest.mark.slow
@pytest.mark.skipif(NO_INDUCTOR is not None, reason=str(NO_INDUCTOR))
def test_compiled_windows_equal_eager_and_do_not_depend_on_their_batch() -> None:
    eager = OrpheusVocoder(model(), TINY_TOKENS)
    compiled = OrpheusVocoder(model(), TINY_TOKENS)
    compiled.compile()
    assert compiled.compiled and not eager.compiled
    ws = windows(9, seed=1)
    ws[4] = ws[4].clone()
    ws[4][3] = TINY_TOKENS.end_of_speech  # no audio code: no audio, the others decode
    want = eager.windows(ws, noise(range(9)))
    alone = [compiled.windows([w], noise([i]))[0] for i, w in enumerate(ws)]
    assert alone[4] is None and want[4] is None
    for a, e in zip(alone, want, strict=True):
        if e is not None:
            assert a is not None and a.shape == e.shape == (SPF,)
            assert (a - e).abs().max().item() <= 2e-4
    rng = random.Random(2)
    for b in (2, 3, 5, 8, 9):
        rows = rng.sample(range(9), b)
        got = compiled.windows([ws[i] for i in rows], noise(rows))
        for out, i in zip(got, rows, strict=True):
            one = alone[i]
            if one is None:
                assert out is None
            else:
                assert out is not None and torch.equal(out, one), (b, i)
    (span,) = compiled.snac.compiled_spans.values()
    assert span.runs >= 1 + 9 + 5  # the warm-up's, each alone, each batch
    # after their compiling calls both artifacts ran their code directly (no guard check): the
    # equalities above are of that path, at batch sizes other than the one that compiled
    assert span._run.direct(True) and span._run.direct(False)
    # compiled with the snake activations stored once (not recomputed in every conv tap)
    assert span._run.realize_opcount == REALIZE_OPCOUNT is not None
