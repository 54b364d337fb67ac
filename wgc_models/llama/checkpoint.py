"""Llama's checkpoint: a Hugging Face ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` safetensors
folder, whose tensor names are `wgc_models.llama.model.LlamaDecoder`'s own (no conversion);
its ``config.json`` read as a `DecoderConfig`. Loading is strict
(`wgc_models.layers.loading.load_checkpoint`); a tied ``lm_head.weight`` may be absent.
"""

from __future__ import annotations

from pathlib import Path

import torch

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.loading import load_checkpoint
from wgc_models.llama.model import LlamaDecoder


def from_pretrained(
    path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> LlamaDecoder:
    """Build from ``config.json`` and load the safetensors weights, strictly."""
    cfg = DecoderConfig.from_pretrained(path)
    model = LlamaDecoder(cfg)
    optional = ("lm_head.weight",) if cfg.tie_word_embeddings else ()
    load_checkpoint(model, path, optional=optional)
    return model.to(device=device, dtype=dtype).eval()
