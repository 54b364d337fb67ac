"""Orpheus's configs: the tiny one the tests and the CPU examples run, and the real one beside
it, one parameter change away. Each is what the reference implementation takes: the LM's HF
``LlamaConfig`` fields (``config.json`` of ``canopylabs/orpheus-3b-0.1-ft``), ``snac.SNAC``'s
arguments (``config.json`` of ``hubertsiuzdak/snac_24khz``) and the token ranges.

What shrinks and why: the text vocabulary (``tokeniser_length`` 128256 → 512: the shipped tiny
byte-level BPE, `tiny_tokenizers`, its specials at the same offsets from the end:
``begin_of_text`` is the first of the last 256 ids in the real model, here 496, the first of
the last 16, and ``<|eot_id|>`` nine after it) and the SNAC codebooks (4096 → 64 codes) set
the LM's vocabulary (``audio_offset + 7 · codebook_size + 2``: 156940 → 972); the LM shrinks to
2 layers of width 64; SNAC's widths to 64 (decoder) and 4 (encoder). The structure — Llama 3
rotary scaling, tied embeddings, 7 tokens per frame over 3 codebooks of strides 4, 2, 1, noise
blocks, depthwise convolutions, and SNAC's rates (hop 512 = 8·8·4·2, so ``samples_per_frame`` =
2048 as in the real model: the tiny model's audio lasts as long as the real one's) — is the
real one.
"""

from __future__ import annotations

from typing import Any

from wgc_models.orpheus.model import OrpheusTokens
from wgc_models.orpheus.snac import SnacConfig

REAL_TOKENS = OrpheusTokens()
TINY_TOKENS = OrpheusTokens(
    tokeniser_length=512, codebook_size=64, begin_of_text=496, end_of_text=505
)

_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# `transformers.LlamaConfig(**REAL_LM)`: Llama 3.2 3B with Orpheus's vocabulary
REAL_LM: dict[str, Any] = {
    "vocab_size": REAL_TOKENS.vocab_size,  # 156940
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 28,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": True,
    "rope_parameters": _ROPE,
    "bos_token_id": 128000,
    "eos_token_id": REAL_TOKENS.end_of_speech,
}

TINY_LM: dict[str, Any] = {
    **REAL_LM,
    "vocab_size": TINY_TOKENS.vocab_size,  # 972
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "bos_token_id": TINY_TOKENS.begin_of_text,
    "eos_token_id": TINY_TOKENS.end_of_speech,
}

# `snac.SNAC(**REAL_SNAC.to_dict())`: the 24 kHz codec Orpheus decodes with
REAL_SNAC = SnacConfig()
TINY_SNAC = SnacConfig(
    encoder_dim=4,
    decoder_dim=64,
    codebook_size=TINY_TOKENS.codebook_size,
)
