"""Orpheus's nodes over a fake engine, for `benchmarks/host_overhead.py`.

`FakeLM` is Orpheus's `LLM` node (`wgc_models/orpheus/nodes.py`: its prefill, its captured decode
step, its sampling and stop bookkeeping, the KV pool's appends and page tables) whose engine
does no model work: `FakeEngine` appends to the pool as the real one does and returns fixed
logits, zero everywhere but ``end_of_speech`` (very low), so Orpheus's audio mask picks each
position's first audio code and a request speaks exactly ``option max_tokens`` tokens.
`FakeVocoder` turns a window into fixed samples. What the benchmark measures is then the
runtime's and the nodes' own host cost per decode step.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from wgc_models.llama.engine import DecoderEngine
from wgc_models.orpheus.model import orpheus_tokens
from wgc_models.orpheus.nodes import LLM
from wgc_runtime.contract.node import KvCache, Node, NodeError
from wgc_runtime.engines.capture import StaticBuffer


class FakeEngine(DecoderEngine):
    """A `DecoderEngine` whose model step takes ~0 time (module docstring)."""

    def __init__(self, model, pool, backend, end_of_speech: int) -> None:
        super().__init__(model, pool, backend)
        vocab = model.config.vocab_size
        self.fixed = torch.zeros(1, vocab)
        self.fixed[0, end_of_speech] = -1e4
        self.fixed_next = self.fixed.argmax(-1)  # the fixed logits' greedy token, once

    @torch.inference_mode()
    def forward(
        self,
        seqs: Sequence[tuple[Hashable, str]],
        tokens: Sequence[torch.Tensor],
        *,
        all_logits: bool = False,
    ) -> Any:
        for (request, label), t in zip(seqs, tokens, strict=True):
            self.pool.append(request, label, int(t.numel()))
        if all_logits:
            return [self.fixed.expand(int(t.numel()), -1) for t in tokens]
        return self.fixed.expand(len(seqs), -1)

    def decode_buffers(self, width: int) -> dict[str, StaticBuffer]:
        pad_page = self.pad_slot // self.pool.page_size
        return {
            "tokens": StaticBuffer((), torch.long, 0),
            "positions": StaticBuffer((), torch.long, 0),
            "slots": StaticBuffer((), torch.long, self.pad_slot),
            "kv_lens": StaticBuffer((), torch.int32, 1),
            "block_tables": StaticBuffer((width,), torch.int32, pad_page),
        }

    def decode_unit(
        self, bufs: Mapping[str, torch.Tensor], *, compiled: bool = False
    ) -> dict[str, torch.Tensor]:
        n = bufs["tokens"].shape[0]
        # fixed logits and their greedy token, in ~0 time (no argmax over the vocabulary a
        # step: that is model work, not host overhead; the node's own mask and argmax stay)
        return {"logits": self.fixed.expand(n, -1), "next_token": self.fixed_next.expand(n)}


class FakeLM(LLM):
    """Orpheus's `LLM` node over `FakeEngine` (module docstring)."""

    def engine(self, kv: KvCache | None) -> DecoderEngine:
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.model.config.num_heads)
            eos = orpheus_tokens(self.config).end_of_speech
            self._engine = FakeEngine(self.model, kv.pool, backend, eos)
        return self._engine


class FakeVocoder(Node):
    """A window of tokens -> 2048 fixed samples (one Orpheus frame), batched."""

    def forward(self, batch):
        audio = torch.zeros(2048)
        return [{"audio": audio} for _ in batch]
