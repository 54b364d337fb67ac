"""BAGEL's configs: the tiny one the tests and the CPU examples run, and the real one beside it
(``ByteDance-Seed/BAGEL-7B-MoT``: a Qwen2.5-7B MoT backbone, SigLIP-so400m/14 without its last
layer, FLUX's VAE), selected by the ``.walk`` file's ``param model``.

What shrinks: the backbone (28 layers of width 3584 → 2 of width 64, kv heads 4 → 2, head size
128 → 16), the vocabulary (152064 → 260: the UTF-8 bytes the stand-in tokenizer
makes, then BAGEL's four special ids at 256..259), the ViT (26 layers of 1152 → 2 of 32 on
32-pixel images of 8-pixel patches), the VAE (channels 128/256/512/512 → 8/16/16/16, 16 latent
channels → 4) and the latent grid (64 → 8 per side). The structure — MoT routing, qk-norm,
one rotary position per image, 2x2 latent patches, 8x VAE — is the real one. ``tiny-text`` is
the tiny model with the shipped tiny BPE's 512-id vocabulary (text in and out as text,
`TINY_TEXT`).
"""

from __future__ import annotations

from dataclasses import replace

from wgc_models.bagel.autoencoder_kl import VaeConfig
from wgc_models.bagel.model import BagelConfig, BagelTokens
from wgc_models.bagel.qwen2_navit import MoTConfig
from wgc_models.layers.siglip import SiglipConfig

REAL = BagelConfig(
    llm=MoTConfig(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        rope_theta=1_000_000.0,
        qk_norm=True,
    ),
    vit=SiglipConfig(
        hidden_size=1152,
        intermediate_size=4304,
        num_hidden_layers=26,
        num_attention_heads=16,
        image_size=980,
        patch_size=14,
    ),
    vae=VaeConfig(),
    tokens=BagelTokens(),
    latent_patch_size=2,
    max_latent_size=64,
    vit_max_num_patch_per_side=70,
    timestep_shift=3.0,
)

TINY = BagelConfig(
    llm=MoTConfig(
        vocab_size=260,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_theta=1_000_000.0,
        qk_norm=True,
    ),
    vit=SiglipConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    ),
    vae=VaeConfig(
        block_out_channels=(8, 16, 16, 16), layers_per_block=1, latent_channels=4, norm_num_groups=4
    ),
    tokens=BagelTokens(bos=256, eos=257, start_of_image=258, end_of_image=259),
    latent_patch_size=2,
    max_latent_size=8,
    vit_max_num_patch_per_side=8,
    timestep_shift=3.0,
)

# The tiny model that speaks through the shipped tiny BPE (`wgc_models._shared.tiny_tokenizers`,
# ``bagel/tokenizer.json``: 496 byte-level ids, then Qwen's specials, BAGEL's four among them):
# its vocabulary is the tokenizer's 512 ids and its special ids that file's (a test checks
# them); the text placements (``cpu-text.yaml``) select it.
TINY_TEXT = replace(
    TINY,
    llm=replace(TINY.llm, vocab_size=512),
    tokens=BagelTokens(bos=497, eos=498, start_of_image=507, end_of_image=508),
)

CONFIGS = {"tiny": TINY, "tiny-text": TINY_TEXT, "real": REAL}
