"""V-JEPA 2-AC's configs: the tiny one the tests and the CPU examples run, and the real one
beside it (``facebook/vjepa2-vitg-fpc64-256``'s encoder, the AC predictor of the
``vjepa2-ac-vitg`` release), selected by the ``.walk`` file's ``param model``.

What shrinks: the encoder (ViT-g: 40 layers of width 1408, 16-pixel patches of 256-pixel frames
→ 2 layers of width 32, 4-pixel patches of 16-pixel frames: 16 patches a frame instead of 256)
and the predictor (24 blocks of width 1024, 16 heads → 2 of width 32, 2 heads). The structure —
tubelets of 2, 3-D rotary attention, one action and one state token per frame, block-causal
frames, 7-DOF actions and states — is the real one.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc_models.vjepa2_ac.model import PredictorConfig
from wgc_models.vjepa2_ac.vjepa2 import VJEPA2Config


@dataclass(frozen=True, slots=True)
class VJEPA2ACConfig:
    encoder: VJEPA2Config
    predictor: PredictorConfig


REAL = VJEPA2ACConfig(
    VJEPA2Config(
        hidden_size=1408,
        num_hidden_layers=40,
        num_attention_heads=22,
        patch_size=16,
        crop_size=256,
        mlp_ratio=48 / 11,  # ViT-g's MLP width 6144
    ),
    PredictorConfig(embed_dim=1408, predictor_embed_dim=1024, depth=24, num_heads=16, grid=16),
)

TINY = VJEPA2ACConfig(
    VJEPA2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=4, crop_size=16
    ),
    PredictorConfig(embed_dim=32, predictor_embed_dim=32, depth=2, num_heads=2, grid=4),
)

# the real model's frame (16 x 16 patches: 258 cached tokens a frame) at narrow widths: what the
# rollout benchmark runs on a CPU, where attention over the growing cache is most of a step
FRAMES = VJEPA2ACConfig(
    VJEPA2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, patch_size=4, crop_size=64
    ),
    PredictorConfig(embed_dim=32, predictor_embed_dim=64, depth=4, num_heads=4, grid=16),
)

CONFIGS = {"tiny": TINY, "frames": FRAMES, "real": REAL}
