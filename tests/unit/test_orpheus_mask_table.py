"""`OrpheusTokens.masked` (the captured decode step's mask, one table row per batch row) equals
`audio_mask` (built per row) at every position of the first frames and far ones."""

from __future__ import annotations

import pytest
import torch

from wgc_models.orpheus.config import REAL_TOKENS, TINY_TOKENS
from wgc_models.orpheus.model import audio_mask


@pytest.mark.parametrize("tokens", [TINY_TOKENS, REAL_TOKENS], ids=["tiny", "real"])
def test_masked_audio_equals_audio_mask(tokens) -> None:
    vocab = tokens.vocab_size
    drops = tokens.drops(vocab, "cpu")
    positions = torch.tensor([0, 1, 6, 7, 8, 13, 14, 15, 700, 701, 4095], dtype=torch.int64)
    logits = torch.randn(len(positions), vocab)
    want = audio_mask(logits, tokens, positions)
    got = tokens.masked(logits, drops, positions)
    assert torch.equal(got, want)
    assert torch.equal(got.isinf(), want.isinf())
