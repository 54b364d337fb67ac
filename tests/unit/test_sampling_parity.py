"""`wgc_models.layers.sampling` against transformers' logits processors: the same scores
from the same logits and history (repetition penalty, suppression, temperature, top-k, top-p,
in ``generate``'s order), greedy as ``argmax``, and seeded draws that repeat."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers.generation.logits_process import (  # noqa: E402
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from wgc_models.layers.sampling import Sampling, choose, process_logits  # noqa: E402

V = 64


def _hf(params: Sampling) -> LogitsProcessorList:
    procs = LogitsProcessorList()
    if params.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if params.suppress:
        procs.append(SuppressTokensLogitsProcessor(list(params.suppress)))
    if params.do_sample:
        if params.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(params.temperature))
        if params.top_k:
            procs.append(TopKLogitsWarper(params.top_k))
        if params.top_p < 1.0:
            procs.append(TopPLogitsWarper(params.top_p))
    return procs


@pytest.mark.parametrize(
    "params",
    [
        Sampling(),
        Sampling(repetition_penalty=1.3, suppress=(3, 7, 60)),
        Sampling(do_sample=True, temperature=0.6, top_p=0.8, repetition_penalty=1.3),
        Sampling(do_sample=True, temperature=0.9, top_k=5, top_p=0.9, repetition_penalty=1.05),
        Sampling(do_sample=True, top_k=50, top_p=0.8),
    ],
)
def test_scores_match_hf_processors(params):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, V, generator=g) * 3
    history = torch.randint(0, V, (3, 9), generator=g)
    # transformers annotates input_ids as LongTensor, a type torch never returns
    want = _hf(params)(history, logits.clone())  # pyright: ignore[reportArgumentType]
    got = process_logits(logits, params, list(history))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert torch.allclose(got[finite], want[finite], atol=1e-6)
    if not params.do_sample:
        assert torch.equal(choose(logits, params, list(history)), want.argmax(-1))


def test_seeded_draws_repeat():
    params = Sampling(do_sample=True, temperature=0.8, top_p=0.95)
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(1))
    draw = [choose(logits, params, generator=torch.Generator().manual_seed(s)) for s in (5, 5, 6)]
    assert torch.equal(draw[0], draw[1])
    seq = torch.stack([choose(logits, params, generator=torch.Generator().manual_seed(s))
                       for s in range(8)])  # fmt: skip
    assert len({tuple(r.tolist()) for r in seq}) > 1  # the seed matters


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="temperature"):
        Sampling(temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=1.5)
