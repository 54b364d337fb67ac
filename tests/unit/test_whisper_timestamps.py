"""Whisper's timestamp rules (`wgc_models.whisper.timestamps.timestamp_rules`) against
transformers' ``WhisperTimeStampLogitsProcessor`` on the same logits and generated tokens:
pairs, no going back, the first token a timestamp within ``max_initial_timestamp_index``, a
timestamp when their mass beats every text token."""

from __future__ import annotations

import random

import pytest
import torch

from wgc_models.whisper.timestamps import timestamp_rules

transformers = pytest.importorskip("transformers")

EOS, NO_TS, VOCAB = 50, 60, 100  # text ids below EOS; timestamps 61..99
PROMPT = [55, 56, 57]


def _theirs(logits: torch.Tensor, generated: list[int], max_initial: int | None) -> torch.Tensor:
    gc = transformers.GenerationConfig(
        no_timestamps_token_id=NO_TS, eos_token_id=EOS, max_initial_timestamp_index=max_initial
    )
    proc = transformers.WhisperTimeStampLogitsProcessor(gc, begin_index=len(PROMPT))
    ids = torch.tensor([PROMPT + generated])
    return proc(ids, logits[None].clone())[0]


def _sequences(rng: random.Random) -> list[list[int]]:
    out: list[list[int]] = [[], [61], [61, 20], [61, 20, 64], [61, 20, 64, 64], [61, 20, 64, 64, 7]]
    for _ in range(60):
        n = rng.randrange(1, 9)
        out.append([rng.choice([rng.randrange(0, EOS), rng.randrange(NO_TS + 1, VOCAB)])
                    for _ in range(n)])  # fmt: skip
    return out


@pytest.mark.parametrize("max_initial", [None, 0, 5])
@pytest.mark.parametrize("stamp_bias", [-4.0, 0.0, 3.0])
def test_the_rules_equal_transformers_processor(max_initial: int | None, stamp_bias: float) -> None:
    rng = random.Random(7)
    g = torch.Generator().manual_seed(3)
    for generated in _sequences(rng):
        logits = torch.randn(VOCAB, generator=g)
        logits[NO_TS + 1 :] += stamp_bias  # timestamps unlikely, even, or likely
        ours = timestamp_rules(logits, generated, no_timestamps=NO_TS, eos=EOS,
                               max_initial=max_initial)  # fmt: skip
        want = _theirs(logits, generated, max_initial)
        assert torch.equal(ours, want), generated
        if generated == []:
            assert ours[: NO_TS + 1].isinf().all()  # the first token is a timestamp
