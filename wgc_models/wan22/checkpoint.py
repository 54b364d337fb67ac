"""Wan2.2's checkpoint: a diffusers Wan folder (``text_encoder/``, ``transformer/``,
``transformer_2/``, ``vae/``, as ``Wan-AI/Wan2.2-T2V-A14B-Diffusers`` lays them out), whose
tensor names are the parts' own; each part reads its ``config.json`` and loads strictly.

* `load_text_encoder`: the umT5 encoder; the tied ``encoder.embed_tokens.weight`` may be
  present or absent.
* `load_transformer`: one expert's transformer (whole or sharded safetensors).
* `load_decoder` / `load_encoder`: the VAE's halves of one ``vae/`` folder, each strict on its
  own names (``decoder.*`` and ``post_quant_conv.*``; ``encoder.*`` and ``quant_conv.*``), the
  other half's names skipped.
"""

from __future__ import annotations

from pathlib import Path

from wgc_models.layers.loading import checkpoint_files, load_checkpoint, open_safetensors
from wgc_models.wan22.text import UMT5Config, UMT5Encoder
from wgc_models.wan22.transformer import WanDitConfig, WanTransformer
from wgc_models.wan22.vae import WanVaeConfig, WanVaeDecoder
from wgc_models.wan22.vae_encoder import WanVaeEncoder

TIED = "encoder.embed_tokens.weight"


def load_text_encoder(path: str | Path, cfg: UMT5Config | None = None) -> UMT5Encoder:
    """The encoder of a ``text_encoder/`` folder (``config.json`` and its safetensors, whole
    or sharded), loaded strictly."""
    model = UMT5Encoder(cfg or UMT5Config.from_folder(path))
    load_checkpoint(model, path, optional={TIED})
    return model


def load_transformer(path: str | Path, cfg: WanDitConfig | None = None) -> WanTransformer:
    """A transformer from a diffusers ``transformer/`` folder (``config.json`` and
    ``diffusion_pytorch_model*.safetensors``, whole or sharded), loaded strictly."""
    model = WanTransformer(cfg or WanDitConfig.from_folder(path))
    load_checkpoint(model, path)
    return model


ENCODER_PREFIXES = ("encoder.", "quant_conv.")


def load_decoder(path: str | Path, cfg: WanVaeConfig | None = None) -> WanVaeDecoder:
    """The decoder of a diffusers ``vae/`` folder (``config.json`` and
    ``diffusion_pytorch_model.safetensors``), loaded strictly on its half."""
    model = WanVaeDecoder(cfg or WanVaeConfig.from_folder(path))
    other: set[str] = set()
    for file in checkpoint_files(path):
        with open_safetensors(file) as f:
            other.update(n for n in f.keys() if n.startswith(ENCODER_PREFIXES))  # noqa: SIM118
    load_checkpoint(model, path, optional=other)
    return model


DECODER_PREFIXES = ("decoder.", "post_quant_conv.")


def load_encoder(path: str | Path, cfg: WanVaeConfig | None = None) -> WanVaeEncoder:
    """The encoder of a diffusers ``vae/`` folder, loaded strictly on its half."""
    model = WanVaeEncoder(cfg or WanVaeConfig.from_folder(path))
    other: set[str] = set()
    for file in checkpoint_files(path):
        with open_safetensors(file) as f:
            other.update(n for n in f.keys() if n.startswith(DECODER_PREFIXES))  # noqa: SIM118
    load_checkpoint(model, path, optional=other)
    return model
