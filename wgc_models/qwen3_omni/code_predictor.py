"""The Qwen3-Omni Talker's code predictor: given the Talker's last hidden state and the codec
frame's first code, it predicts the frame's remaining ``num_code_groups − 1`` codes (the
residual codebooks), one after another.

Names as HF's ``Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration`` under
``talker.code_predictor.``: ``model.layers.{i}…`` (a dense Qwen3 stack: q/k norms, SwiGLU),
``model.norm``, ``model.codec_embedding.{j}`` and ``lm_head.{j}`` for ``j`` in
``0 … groups − 2``.

One frame is one short generation, as HF's ``code_predictor.generate`` in the Talker's
``prepare_inputs_for_generation``: a 2-token prefill ``[talker hidden, talker
codec_embedding(c0)]`` whose last logits (``lm_head[0]``) give ``c1``, then for ``j = 1 …
groups − 2`` one token ``codec_embedding[j − 1](c_j)`` whose logits (``lm_head[j]``) give
``c_{j+1}``. Each frame starts from an empty cache, so `CodePredictorEngine` keeps its own small
paged pool (a scratch cache, not a node's KV: each request's sequence lives for one frame) and
runs a batch of frames together. It also returns the embedding sum the Talker's next input
starts from: ``talker codec_embedding(c0) + Σ_j codec_embedding[j](c_{j+1})``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable

import torch
from torch import nn

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.sampling import GREEDY, Sampling, choose
from wgc_models.qwen3_omni.qwen3_stack import Qwen3Stack
from wgc_models.qwen3_omni.stack_engine import StackEngine, pool_for


class _Model(Qwen3Stack):
    def __init__(self, cfg: DecoderConfig, groups: int):
        super().__init__(cfg)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, cfg.hidden_size) for _ in range(groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: DecoderConfig, groups: int):
        super().__init__()
        self.groups = groups
        self.model = _Model(cfg, groups)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(groups - 1)
        )


class CodePredictorEngine:
    """`CodePredictor` over a private scratch pool (`frames`)."""

    def __init__(self, predictor: CodePredictor, *, max_batch: int = 16, page_size: int = 16):
        self.predictor = predictor
        pages = max_batch * -(-(predictor.groups + 1) // page_size)
        pool, backend = pool_for(predictor.model, pages=pages, page_size=page_size)
        self.engine = StackEngine(predictor.model, pool, backend)
        self._ids = itertools.count()  # scratch sequence names: one per (frame, row)

    @torch.inference_mode()
    def frames(
        self,
        hidden: torch.Tensor,
        c0: torch.Tensor,
        c0_embed: torch.Tensor,
        *,
        sampling: Sampling = GREEDY,
        generator: torch.Generator | None = None,
        on_logits: Callable[[int, torch.Tensor], None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For a batch of rows (``hidden`` ``[B, H]`` the Talker's last hidden state, ``c0``
        ``[B]`` the frame's first code, ``c0_embed`` ``[B, H]`` its Talker embedding): the
        frame's codes ``[B, groups]`` (``c0`` first) and the embedding sum ``[B, H]``.
        ``on_logits(j, logits)`` sees each group's logits (tests)."""
        p, b = self.predictor, hidden.shape[0]
        seqs: list[tuple[Hashable, str]] = [(("cp", next(self._ids)), "main") for _ in range(b)]
        try:
            out, _ = self.engine.forward(
                seqs, [torch.stack((hidden[i], c0_embed[i])) for i in range(b)]
            )
            last = torch.stack([o[-1] for o in out])
            codes, total = [c0], c0_embed.clone()
            for j in range(p.groups - 1):
                logits = p.lm_head[j](last).float()
                if on_logits is not None:
                    on_logits(j, logits)
                code = choose(logits, sampling, generator=generator)
                codes.append(code)
                emb = p.model.codec_embedding[j](code)
                total = total + emb
                if j < p.groups - 2:
                    out, _ = self.engine.forward(seqs, list(emb[:, None]))
                    last = torch.cat(out)
            return torch.stack(codes, dim=1), total
        finally:
            for request, _ in seqs:
                self.engine.free(request)


def predictor_sampling(talker: Sampling) -> Sampling:
    """HF's rule for the code predictor: greedy when the Talker is; when it samples, top-k 50
    and top-p 0.8 at temperature 1 (``prepare_inputs_for_generation``)."""
    if not talker.do_sample:
        return GREEDY
    return Sampling(do_sample=True, top_k=50, top_p=0.8)
