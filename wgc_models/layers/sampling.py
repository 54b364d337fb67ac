"""Choosing the next token from logits: greedy by default; temperature, top-k, top-p and a
repetition penalty as options, drawn from a caller's `torch.Generator` so a seeded request is
reproducible.

The processing follows Hugging Face ``generate`` exactly, in its order (so the reference
pipelines, which run transformers modules, and wgc's components pick the same tokens from the
same logits): the repetition penalty over the ids seen so far (`RepetitionPenaltyLogitsProcessor`:
a seen token's logit is divided by the penalty when positive, multiplied when negative), then
suppressed ids set to ``-inf`` (`SuppressTokensLogitsProcessor`); when sampling, the temperature,
top-k (`TopKLogitsWarper`) and top-p (`TopPLogitsWarper`: the smallest set whose probability
reaches ``top_p``, at least one token kept); then ``argmax`` (greedy) or one multinomial draw
from the softmax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampling:
    """How a next token is chosen. ``do_sample=False`` is greedy (temperature, top-k and top-p
    are then ignored, as in HF); the repetition penalty and suppression apply either way."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    repetition_penalty: float = 1.0  # 1.0: off
    suppress: tuple[int, ...] = ()

    def __post_init__(self):
        if self.temperature <= 0 or self.repetition_penalty <= 0:
            raise ValueError("temperature and repetition_penalty must be positive")
        if not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("top_p must be in (0, 1] and top_k non-negative")


GREEDY = Sampling()


def process_logits(
    logits: torch.Tensor, params: Sampling, history: Sequence[torch.Tensor] = ()
) -> torch.Tensor:
    """The scores HF's logits processors make of ``logits`` (``[batch, vocab]``, fp32);
    ``history[b]`` holds the ids row ``b`` has seen (for the repetition penalty)."""
    scores = logits.float()
    if params.repetition_penalty != 1.0 and history:
        scores = scores.clone()
        for b, seen in enumerate(history):
            if seen.numel():
                seen = seen.to(scores.device, torch.long)
                ids = cast(torch.Tensor, seen.unique())  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
                row = scores[b, ids]
                pen = params.repetition_penalty
                scores[b, ids] = torch.where(row < 0, row * pen, row / pen)
    if params.suppress:
        ids = torch.tensor(params.suppress, device=scores.device, dtype=torch.long)
        scores = scores.index_fill(-1, ids, float("-inf"))
    if not params.do_sample:
        return scores
    if params.temperature != 1.0:
        scores = scores / params.temperature
    if params.top_k:
        k = min(params.top_k, scores.shape[-1])
        kth = torch.topk(scores, k)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        remove = cum <= (1 - params.top_p)
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scores


def choose(
    logits: torch.Tensor,
    params: Sampling = GREEDY,
    history: Sequence[torch.Tensor] = (),
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The next token of each row of ``logits`` (``[batch, vocab]``): ``[batch]`` int64."""
    scores = process_logits(logits, params, history)
    if not params.do_sample:
        return scores.argmax(-1)
    probs = scores.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
