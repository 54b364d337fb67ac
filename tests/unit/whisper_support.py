"""A tiny Whisper checkpoint written by transformers itself, for the Whisper tests.

`write_checkpoint` saves ``WhisperForConditionalGeneration(WhisperConfig(**TINY))`` with seeded
weights (twice fan-in scale, so its greedy tokens vary), its generation settings in
``generation_config.json`` as the published checkpoints carry them, and the tiny tokenizer
through ``WhisperTokenizerFast.save_pretrained``. ``eos_scale`` scales the end-of-text row of
the (tied) embedding: the tests pick one at which transformers' own ``generate`` stops early.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from wgc_models.layers.random_init import init_seeded
from wgc_models.whisper import config as tiny

RATE = 16000


def clip(seconds: float = 1.5, seed: int = 0) -> torch.Tensor:
    """A chirp with a little seeded noise (16 kHz, f32)."""
    n = int(seconds * RATE)
    t = torch.arange(n) / RATE
    g = torch.Generator().manual_seed(seed)
    tone = 0.3 * torch.sin(2 * torch.pi * (200 + 300 * t) * t)
    return (tone + 0.05 * torch.randn(n, generator=g)).float()


def hf_model(eos_scale: float = 1.0, seed: int = 3) -> Any:
    import transformers

    cfg = transformers.WhisperConfig(**{k: v for k, v in tiny.TINY.items() if k != "model_type"})
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    init_seeded(model, seed, 2.0, keep=("encoder.embed_positions",))
    with torch.no_grad():
        emb = model.model.decoder.embed_tokens.weight
        emb[tiny.NO_TIMESTAMPS + 1 :] = 0  # no timestamp tokens with timestamps off
        emb[tiny.EOT] *= eos_scale
    tok = Tokenizer.from_file(str(tiny.path_of()))
    for key, value in tiny.tiny_generation(tok).items():
        setattr(model.generation_config, key, value)
    return model


def hf_tokenizer() -> Any:
    import transformers

    special = "<|endoftext|>"
    # transformers exports its classes lazily, out of its stubs' sight
    return transformers.WhisperTokenizerFast(  # pyright: ignore[reportAttributeAccessIssue]
        tokenizer_object=Tokenizer.from_file(str(tiny.path_of())),
        bos_token=special,
        eos_token=special,
        unk_token=special,
        pad_token=special,
    )


def write_checkpoint(path: Path, model: Any, *, shard: bool = False) -> Path:
    kw = {"max_shard_size": "300KB"} if shard else {}
    model.save_pretrained(path, **kw)
    hf_tokenizer().save_pretrained(path)
    return path


def generate(model: Any, features: torch.Tensor, **kw: Any) -> list[int]:
    """``model.generate`` on one window's features: the new tokens (EOS included when it
    ended there), on a fresh copy of the generation settings (``generate`` changes them)."""
    gc = copy.deepcopy(model.generation_config)
    out = model.generate(features[None], generation_config=gc, return_dict_in_generate=True, **kw)
    return out.sequences[0].tolist()
