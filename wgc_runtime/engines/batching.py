"""The step-engine interface: what a decoder over one `PagedKVPool` offers its nodes
(`StepEngine`), and the name of one of its sequences (`Seq`).

`wgc_runtime.components.decode_engine.DecoderEngine` is one; nodes drive it through the
executor (its captured steps run the engine's static decode unit, `unit_for`, over the buffers
of `decode_buffers`). The continuous batcher that used to drive it here directly
(``ContinuousBatcher``, which serving never ran) is gone (issue 29, point 2; issue 31): the
executor batches a decode loop across requests, and `decode_runner` is the runtime's decode
runner.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Protocol

import torch

from wgc_runtime.engines.capture import StaticBuffer, UnitFn
from wgc_runtime.engines.kv_pool import PagedKVPool

Seq = tuple[Hashable, str]  # (request, label): one sequence of the pool


class StepEngine(Protocol):
    """A decoder over one `PagedKVPool` whose requests and
    labels are the pool's. ``prefill`` and ``decode`` append to the named sequences and return
    the logits of each one's last token (``[len(seqs), vocab]``); the unit of ``unit_for`` reads
    the buffers of ``decode_buffers``, and its padding rows write to ``pad_slot`` (a slot on a
    page of its own)."""

    @property
    def pool(self) -> PagedKVPool: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def pad_slot(self) -> int: ...

    def prefill(self, seqs: Sequence[Seq], prompts: Sequence[torch.Tensor]) -> torch.Tensor: ...

    def decode(self, seqs: Sequence[Seq], tokens: torch.Tensor) -> torch.Tensor: ...

    def free(self, request: Hashable) -> None: ...

    def width_for(self, max_len: int) -> int:
        """Page-table width of static buffers for sequences up to ``max_len`` tokens."""
        ...

    def decode_buffers(self, width: int) -> Mapping[str, StaticBuffer]:
        """The static inputs of one decode step: ``tokens``, ``positions``, ``slots``,
        ``kv_lens`` and ``block_tables`` (``width`` pages per row)."""
        ...

    def unit_for(self, backend: str) -> UnitFn:
        """The static decode unit (outputs ``logits`` and ``next_token``) a `GraphRunner` with
        ``backend`` should run."""
        ...
