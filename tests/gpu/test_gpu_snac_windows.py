"""SNAC's window decode on a GPU: windows decoded together are each bit for bit the window
decoded alone (`OrpheusVocoder.windows`: matrix products per row, elementwise ops once over the
batch on the device).

Marked `gpu`; skipped without CUDA (``benchmarks/gpu_check.sh`` runs it)."""

from __future__ import annotations

import pytest
import torch

from wgc_models.layers.random_init import init_seeded
from wgc_models.orpheus.config import TINY_SNAC, TINY_TOKENS
from wgc_models.orpheus.model import OrpheusVocoder
from wgc_models.orpheus.snac import SnacDecoder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_gpu_windows_together_are_each_what_they_are_alone() -> None:
    snac = SnacDecoder(TINY_SNAC)
    init_seeded(snac, 0)
    gpu = OrpheusVocoder(snac.eval().cuda(), TINY_TOKENS)
    g = torch.Generator().manual_seed(3)
    pos = torch.arange(28)
    base = TINY_TOKENS.audio_offset + (pos % 7) * TINY_TOKENS.codebook_size
    ws = [base + torch.randint(1, TINY_TOKENS.codebook_size, (28,), generator=g) for _ in range(16)]

    def noise(i: int) -> torch.Generator:
        return torch.Generator("cuda").manual_seed(100 + i)

    cuda_ws = [w.cuda() for w in ws]
    together = gpu.windows(cuda_ws, [noise(i) for i in range(16)])
    for i, w in enumerate(cuda_ws):
        (alone,) = gpu.windows([w], [noise(i)])
        want = together[i]
        assert alone is not None and want is not None
        assert torch.equal(want, alone), i
