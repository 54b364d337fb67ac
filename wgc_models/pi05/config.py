"""π0.5's configs: the tiny one the tests and the CPU examples run, and the real one beside it
(openpi's ``pi05_base``: PaliGemma 3B — SigLIP-so400m/14 at 224 px and Gemma 2B — with a
Gemma-300M action expert), selected by the ``.walk`` file's ``param model``.

What shrinks: the language model (18 layers of width 2048, head size 256 → 2 of width 64, head
size 16), the expert (18 of width 1024 → 2 of width 32, same depth, kv heads and head size as
the language model, as π0 requires), SigLIP (27 layers of 1152 on 224-pixel images → 1 of 32
on 16-pixel images: 16 tokens a camera instead of 256) and the vocabulary (257152 → 512, the
tiny tokenizer's: `wgc_models.pi05.text`). The structure — one kv head, GeGLU, the expert's
adaptive norms on the flow time, 50 actions of 32 numbers, 10 Euler steps — is the real one.
"""

from __future__ import annotations

from wgc_models.layers.siglip import SiglipConfig
from wgc_models.pi05.gemma import GemmaConfig
from wgc_models.pi05.model import Pi0Config

REAL = Pi0Config(
    vision=SiglipConfig(
        hidden_size=1152,
        intermediate_size=4304,
        num_hidden_layers=27,
        num_attention_heads=16,
        image_size=224,
        patch_size=14,
    ),
    text=GemmaConfig(
        hidden_size=2048,
        intermediate_size=16384,
        num_hidden_layers=18,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=256,
        vocab_size=257152,
    ),
    expert=GemmaConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=18,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=256,
    ),
    pi05=True,
)

TINY = Pi0Config(
    vision=SiglipConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=16,
        patch_size=4,
    ),
    text=GemmaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=512,  # the tiny tokenizer.json's ids
    ),
    expert=GemmaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
    ),
    pi05=True,
)

CONFIGS = {"tiny": TINY, "real": REAL}
