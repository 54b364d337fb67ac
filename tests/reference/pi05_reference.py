"""π0.5's action flow called directly, one observation at a time: what the example's nodes must
equal (`tests/e2e/test_pi05_example.py`) and the baseline of `benchmarks/pi05_actions.py`.

SigLIP and the projector on the cameras (the image tokens rounded to bf16, as the example's
``image_embeddings: bf16`` port carries them), the prefix (image tokens, then the prompt)
prefilled once into a dense cache, then for each noise ``steps`` Euler steps of the action
expert against it (``t`` from 1 down by ``1 / steps``), reading the prefix without writing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from wgc_models.layers.block_attention import Block, DenseBlocks, DenseKV
from wgc_models.layers.siglip import pixels
from wgc_models.pi05.model import Pi0


@torch.inference_mode()
def action_chunks(
    policy: Pi0,
    cameras: torch.Tensor,
    prompt: torch.Tensor,
    noises: Sequence[torch.Tensor],
    steps: int,
) -> list[torch.Tensor]:
    """The action chunk ``[chunk, action_dim]`` of each noise, for one observation (``cameras``
    ``u8 [N, H, W, 3]``, ``prompt`` the instruction and state's token ids)."""
    cfg = policy.config
    tokens = policy.encode_images(pixels(cameras, cfg.vision.image_size))
    prefix = policy.prefix_embeddings(tokens.to(torch.bfloat16).float(), prompt)
    cache = DenseKV(cfg.text.num_hidden_layers)
    pre, suf = cfg.positions(prefix.shape[0])
    policy.prefill(prefix, pre, DenseBlocks(cache, [Block("obs", "main", prefix.shape[0])]))
    chunks = []
    for x in noises:
        t = 1.0
        for _ in range(steps):
            block = Block("obs", "main", len(suf), write=False, groups=policy.suffix_groups())
            v = policy.velocity(x[None], torch.tensor([t]), suf, DenseBlocks(cache, [block]))
            x, t = Pi0.euler(x[None], v, steps)[0], t - 1.0 / steps
        chunks.append(x)
    return chunks
