"""Wan's VAE decoder against diffusers' ``AutoencoderKLWan.decode``: tiny random VAEs saved by
diffusers itself (Wan2.1's layout, and Wan2.2's residual layout with 2×2 patches) load strictly
into `WanVaeDecoder` (the encoder's names skipped, a missing decoder name refused) and decode
the same video frame for frame, the per-chunk causal cache included; the named published
configs have the decoder's parameters named and shaped as diffusers'. The encoder likewise:
its half loaded strictly, the same latent mean as ``encode(...).latent_dist.mode()``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from wgc_models.layers.loading import CheckpointError
from wgc_models.wan22.checkpoint import load_decoder, load_encoder
from wgc_models.wan22.vae import NAMED_VAE, WanVaeConfig, WanVaeDecoder
from wgc_models.wan22.vae_encoder import WanVaeEncoder

diffusers = pytest.importorskip("diffusers")

V21 = {"base_dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1}
V22 = {
    "base_dim": 8,
    "decoder_base_dim": 12,
    "z_dim": 4,
    "dim_mult": [1, 2, 2, 2],
    "num_res_blocks": 1,
    "is_residual": True,
    "in_channels": 12,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_spatial": 16,
}


def _saved(raw: dict, folder: Path):
    torch.manual_seed(0)
    ref = diffusers.AutoencoderKLWan(**raw).eval()
    with torch.no_grad():
        for p in ref.parameters():  # gammas start at ones, biases at zeros: make them matter
            p.add_(0.1 * torch.randn_like(p))
    ref.save_pretrained(folder, safe_serialization=True)
    return ref


@pytest.mark.parametrize(
    ("raw", "frames"), [(V21, 3), (V21, 1), (V22, 3)], ids=["2.1", "2.1-1f", "2.2"]
)
def test_decode_equals_diffusers(raw: dict, frames: int, tmp_path: Path):
    ref = _saved(raw, tmp_path)
    ours = load_decoder(tmp_path).eval()
    z = torch.randn(1, 4, frames, 4, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref.decode(z, return_dict=False)[0]
        got = ours.decode(z)
    assert got.shape == want.shape
    assert got.shape[2] == 1 + 4 * (frames - 1)
    assert (got - want).abs().max().item() <= 1e-4


def test_strict_on_the_decoder_half(tmp_path: Path):
    _saved(V21, tmp_path)
    tensors = load_file(tmp_path / "diffusion_pytorch_model.safetensors")
    assert any(n.startswith("encoder.") for n in tensors)  # skipped, not refused
    cfg = WanVaeConfig.from_folder(tmp_path)
    dropped = {
        k: v for k, v in tensors.items() if k != "decoder.mid_block.attentions.0.proj.weight"
    }
    save_file(dropped, tmp_path / "x.safetensors")
    with pytest.raises(CheckpointError, match=r"attentions\.0\.proj"):
        load_decoder(tmp_path / "x.safetensors", cfg)


@pytest.mark.parametrize("name", sorted(NAMED_VAE))
def test_named_configs_have_diffusers_decoder_names(name: str):
    cfg = NAMED_VAE[name]
    raw = {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in ("latents_mean", "latents_std")
    }
    with torch.device("meta"):
        ref = diffusers.AutoencoderKLWan(**raw)
        ours = {**WanVaeDecoder(cfg).state_dict(), **WanVaeEncoder(cfg).state_dict()}
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.items()} == want


@pytest.mark.parametrize(
    ("raw", "frames"), [(V21, 9), (V21, 1), (V22, 9)], ids=["2.1", "2.1-1f", "2.2"]
)
def test_encode_equals_diffusers(raw: dict, frames: int, tmp_path: Path):
    ref = _saved(raw, tmp_path)
    ours = load_encoder(tmp_path).eval()
    side = 32 if raw is V21 else 64
    video = torch.rand(1, 3, frames, side, side, generator=torch.Generator().manual_seed(4)) * 2 - 1
    with torch.no_grad():
        want = ref.encode(video).latent_dist.mode()
        got = ours.encode(video)
    assert got.shape == want.shape
    assert got.shape[2] == 1 + (frames - 1) // 4
    assert (got - want).abs().max().item() <= 1e-4
