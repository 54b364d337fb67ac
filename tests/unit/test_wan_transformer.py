"""Wan's transformer against diffusers' ``WanTransformer3DModel``: a tiny random model saved by
diffusers itself (``save_pretrained``: ``config.json`` and the safetensors) loads strictly into
`WanTransformer` (a missing or an extra name refused) and gives the same velocity (one timestep
per sample, as T2V/A14B run it, and one per token, as TI2V-5B does); the named published
configs have every parameter named and shaped as diffusers' model of the same sizes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from wgc_models.layers.loading import CheckpointError
from wgc_models.wan22.checkpoint import load_transformer
from wgc_models.wan22.transformer import (
    NAMED,
    WanConfigError,
    WanDitConfig,
    WanTransformer,
)

diffusers = pytest.importorskip("diffusers")

TINY = {
    "patch_size": (1, 2, 2),
    "num_attention_heads": 2,
    "attention_head_dim": 12,
    "in_channels": 4,
    "out_channels": 4,
    "text_dim": 16,
    "freq_dim": 8,
    "ffn_dim": 32,
    "num_layers": 2,
    "rope_max_seq_len": 32,
}


def _reference(seed: int = 0, **over):
    torch.manual_seed(seed)
    ref = diffusers.WanTransformer3DModel(**{**TINY, **over}).eval()
    with torch.no_grad():
        for p in ref.parameters():  # norms start at ones, biases at zeros: make them matter
            p.add_(0.1 * torch.randn_like(p))
    return ref


def _inputs(batch: int = 2):
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(batch, 4, 3, 6, 8, generator=g)
    text = torch.randn(batch, 7, 16, generator=g)
    return latents, text


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("transformer")
    ref = _reference()
    ref.save_pretrained(folder, safe_serialization=True)
    return ref, folder


def test_loads_diffusers_folder_and_matches_per_sample_timestep(saved):
    ref, folder = saved
    ours = load_transformer(folder).eval()
    latents, text = _inputs()
    t = torch.tensor([999.0, 412.5])
    with torch.no_grad():
        want = ref(latents, t, text, return_dict=False)[0]
        got = ours(latents, t, text)
    assert got.shape == want.shape == latents.shape
    assert (got - want).abs().max().item() <= 1e-4


def test_matches_per_token_timestep(saved):
    ref, folder = saved
    ours = load_transformer(folder).eval()
    latents, text = _inputs()
    tokens = 3 * 3 * 4
    t = torch.linspace(0, 900, 2 * tokens).reshape(2, tokens)
    t[:, :12] = 0.0  # TI2V: the conditioning frame's tokens at t = 0
    with torch.no_grad():
        want = ref(latents, t, text, return_dict=False)[0]
        got = ours(latents, t, text)
    assert (got - want).abs().max().item() <= 1e-4


def test_strict_loading_refuses_missing_and_extra(saved, tmp_path: Path):
    _, folder = saved
    tensors = load_file(folder / "diffusion_pytorch_model.safetensors")
    cfg = WanDitConfig.from_folder(folder)
    dropped = dict(tensors)
    dropped.pop("blocks.1.attn2.norm_k.weight")
    save_file(dropped, tmp_path / "a.safetensors")
    with pytest.raises(CheckpointError, match="norm_k"):
        load_transformer(tmp_path / "a.safetensors", cfg)
    extra = {**tensors, "blocks.0.attn1.bogus": torch.zeros(1)}
    save_file(extra, tmp_path / "b.safetensors")
    with pytest.raises(CheckpointError, match="bogus"):
        load_transformer(tmp_path / "b.safetensors", cfg)


def test_config_refuses_clip_image_conditioning():
    with pytest.raises(WanConfigError, match="image_dim"):
        WanDitConfig.from_dict({**TINY, "image_dim": 1280})


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_configs_have_diffusers_names_and_shapes(name: str):
    cfg = NAMED[name]
    raw = dataclasses.asdict(cfg)
    with torch.device("meta"):
        ref = diffusers.WanTransformer3DModel(**raw)
        ours = WanTransformer(cfg)
    want = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert got == want
