"""Checkpoints as their projects publish them: SNAC's pickled ``pytorch_model.bin`` (read with
``torch.load(weights_only=True)``), and a speech checkpoint without its tokenizer refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from wgc_models.layers.loading import CheckpointError
from wgc_models.orpheus.checkpoint import snac_from_pretrained
from wgc_models.orpheus.config import TINY_SNAC
from wgc_runtime.contract.node import NodeError

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc_models._shared.speech import text_codec  # noqa: E402


def test_snac_as_published_loads_from_its_pickled_state_dict(tmp_path: Path) -> None:
    """hubertsiuzdak/snac_24khz is ``config.json`` + ``pytorch_model.bin`` (the package's
    ``torch.save(model.state_dict())``): it loads strictly and decodes as the package does."""
    snac = pytest.importorskip("snac")
    torch.manual_seed(0)
    ref = snac.SNAC(**TINY_SNAC.to_dict()).eval()
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(TINY_SNAC.to_dict()))
    ours = snac_from_pretrained(tmp_path)
    g = torch.Generator().manual_seed(3)
    codes = [
        torch.randint(0, TINY_SNAC.codebook_size, (1, 16 // s), generator=g) for s in (4, 2, 1)
    ]
    torch.manual_seed(7)
    with torch.inference_mode():
        want = ref.decode(codes)
    got = ours.decode(codes, torch.Generator().manual_seed(7))
    assert (got - want).abs().max() <= 1e-4


def test_a_pickle_holding_code_is_refused(tmp_path: Path) -> None:
    torch.save({"x": torch.zeros(1), "f": print}, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(TINY_SNAC.to_dict()))
    with pytest.raises(CheckpointError, match=r"cannot read .* as a state dict of tensors"):
        snac_from_pretrained(tmp_path)


def test_a_checkpoint_without_its_tokenizer_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(NodeError, match=r"has no `tokenizer\.json`"):
        text_codec(str(tmp_path), "orpheus")
    assert text_codec("", "orpheus").vocab_size > 0  # no checkpoint: the tiny one


def test_the_vjepa2_ac_predictor_loads_from_the_released_training_checkpoint(tmp_path: Path):
    """``vjepa2-ac-vitg.pt`` as Meta publishes it: a training checkpoint whose ``predictor``
    entry has the reference's names under ``module.backbone.`` (and an ``encoder`` entry and
    bookkeeping beside it); the node's loader takes the predictor, strictly."""
    from wgc_models.layers.random_init import init_seeded
    from wgc_models.vjepa2_ac.checkpoint import load_predictor
    from wgc_models.vjepa2_ac.config import CONFIGS
    from wgc_models.vjepa2_ac.model import ACPredictor

    ref = init_seeded(ACPredictor(CONFIGS["tiny"].predictor), 5)
    released = {
        "encoder": {"module.backbone.patch_embed.proj.weight": torch.zeros(2, 3)},
        "predictor": {f"module.backbone.{k}": v for k, v in ref.state_dict().items()},
        "epoch": 315,
    }
    torch.save(released, tmp_path / "vjepa2-ac-vitg.pt")
    config = {"model": "tiny", "checkpoint": str(tmp_path), "seed": 9}
    got = load_predictor("predictor", config, torch.device("cpu"))
    for k, v in ref.state_dict().items():
        assert torch.equal(got.state_dict()[k], v), k
    released["predictor"].pop("module.backbone.predictor_proj.bias")
    torch.save(released, tmp_path / "vjepa2-ac-vitg.pt")
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): `predictor_proj\.bias`"):
        load_predictor("predictor", {**config, "seed": 10}, torch.device("cpu"))


def test_bagel_loads_its_release_folder(tmp_path: Path) -> None:
    """BAGEL-7B-MoT's layout at tiny sizes: ``ema.safetensors`` (the ViT's patch embedding
    flattened to BAGEL's ``Linear``), ``llm_config.json`` / ``vit_config.json`` written by
    transformers' config classes (the ViT one layer deeper: BAGEL drops the last). The sizes
    come from those files (three backbone layers where the named tiny config has two), the
    weights load strictly, and the ViT computes what the unflattened convolution does."""
    import dataclasses

    transformers = pytest.importorskip("transformers")
    from safetensors.torch import save_file

    from wgc_models.bagel.checkpoint import load_bagel
    from wgc_models.bagel.config import TINY
    from wgc_models.bagel.model import Bagel
    from wgc_models.layers.random_init import init_seeded

    cfg = dataclasses.replace(TINY, llm=dataclasses.replace(TINY.llm, num_hidden_layers=3))
    full = init_seeded(Bagel(cfg), 4, keep=("pos_embed",))
    state = {k: v.contiguous() for k, v in full.state_dict().items()}
    conv = state["vit_model.vision_model.embeddings.patch_embedding.weight"]
    state["vit_model.vision_model.embeddings.patch_embedding.weight"] = (
        conv.permute(0, 2, 3, 1).reshape(conv.shape[0], -1).contiguous()
    )
    save_file(state, tmp_path / "ema.safetensors")
    m, v = cfg.llm, cfg.vit
    transformers.Qwen2Config(
        vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_hidden_layers, num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_key_value_heads, rope_theta=m.rope_theta,
    ).to_json_file(tmp_path / "llm_config.json")  # fmt: skip
    transformers.SiglipVisionConfig(
        hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
        num_hidden_layers=v.num_hidden_layers + 1, num_attention_heads=v.num_attention_heads,
        image_size=v.image_size, patch_size=v.patch_size,
    ).to_json_file(tmp_path / "vit_config.json")  # fmt: skip
    config = {"model": "tiny", "checkpoint": str(tmp_path), "seed": 0, "dtype": "f32"}
    cpu = torch.device("cpu")
    llm, vit = load_bagel("LLM", config, cpu, "llm"), load_bagel("vit_encoder", config, cpu, "vit")
    assert len(llm.language_model.model.layers) == 3
    assert torch.equal(llm.llm2vae.weight, full.llm2vae.weight)
    px = torch.randn(1, 3, v.image_size, v.image_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (vit.vit_tokens(px) - full.vit_tokens(px)).abs().max() <= 1e-5


def _ldm_name(name: str, blocks: int) -> str:
    """diffusers' AutoencoderKL name → FLUX's ``ae.safetensors`` (LDM) name, written from the
    LDM layout (the inverse of the loader's renaming; diffusers' converter checks both)."""
    p = name.split(".")
    side = p[0]
    if p[1] == "conv_norm_out":
        return ".".join([side, "norm_out", *p[2:]])
    if p[1] in ("down_blocks", "up_blocks"):
        i = int(p[2]) if p[1] == "down_blocks" else blocks - 1 - int(p[2])
        stage = "down" if p[1] == "down_blocks" else "up"
        if p[3] == "resnets":
            layer = "nin_shortcut" if p[5] == "conv_shortcut" else p[5]
            return ".".join([side, stage, str(i), "block", p[4], layer, *p[6:]])
        sampler = "downsample" if p[3] == "downsamplers" else "upsample"
        return ".".join([side, stage, str(i), sampler, *p[5:]])
    if p[1] == "mid_block":
        if p[2] == "resnets":
            return ".".join([side, "mid", f"block_{int(p[3]) + 1}", *p[4:]])
        names = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out": "proj_out"}
        rest = p[6:] if p[4] == "to_out" else p[5:]
        return ".".join([side, "mid", "attn_1", names[p[4]], *rest])
    return name


def test_bagels_ae_safetensors_loads_under_flux_names(tmp_path: Path) -> None:
    """BAGEL's own VAE file (FLUX's names, attention as 1×1 convolutions) loads strictly into
    the diffusers-named autoencoder; diffusers' own LDM converter agrees name for name."""
    pytest.importorskip("diffusers")
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint
    from safetensors.torch import save_file

    from wgc_models.bagel.autoencoder_kl import AutoencoderKL
    from wgc_models.bagel.checkpoint import AE, ae_tensors, load_vae
    from wgc_models.bagel.config import TINY
    from wgc_models.layers.random_init import init_seeded

    ours = init_seeded(AutoencoderKL(TINY.vae), 6)
    blocks = len(TINY.vae.block_out_channels)
    ldm = {}
    for name, t in ours.state_dict().items():
        if ".attentions.0.to_" in name and name.endswith("weight"):
            t = t[:, :, None, None]  # FLUX's attention projections are 1x1 convolutions
        ldm[_ldm_name(name, blocks)] = t.contiguous()
    assert len(set(ldm)) == len(ours.state_dict())
    save_file(ldm, tmp_path / AE)
    mine = dict(ae_tensors(tmp_path, blocks))
    config: dict[str, Any] = {"layers_per_block": TINY.vae.layers_per_block}
    config["down_block_types"] = ["DownEncoderBlock2D"] * blocks
    config["up_block_types"] = ["UpDecoderBlock2D"] * blocks
    theirs = convert_ldm_vae_checkpoint(dict(ldm), config)
    assert set(mine) == set(theirs)
    for k, v in theirs.items():
        assert torch.equal(mine[k], v.reshape(mine[k].shape)), k
    vae = load_vae(
        "vae_decoder", {"model": "tiny", "checkpoint": str(tmp_path)}, torch.device("cpu")
    )
    for k, v in ours.state_dict().items():
        assert torch.equal(vae.state_dict()[k], v), k


def test_bagels_text_goes_through_the_release_tokenizer(tmp_path: Path) -> None:
    """A release folder's ``tokenizer.json`` encodes a text segment (no special tokens: the
    component frames it); a release folder without one is refused; no checkpoint: bytes."""
    from tests.unit.test_chat_template import _tokenizer
    from wgc_models.bagel.text import bagel_tokenizer, text_ids

    segment = torch.tensor(list(b"hello there"), dtype=torch.long)
    assert torch.equal(text_ids(bagel_tokenizer("LLM", {}), segment, "LLM"), segment)
    (tmp_path / "llm_config.json").write_text("{}")
    with pytest.raises(NodeError, match=r"release folder .* has no `tokenizer\.json`"):
        bagel_tokenizer("LLM", {"checkpoint": str(tmp_path)})
    fast = _tokenizer(None)
    fast.save_pretrained(tmp_path)
    tok = bagel_tokenizer("LLM", {"checkpoint": str(tmp_path)})
    want = fast("hello there", add_special_tokens=False)["input_ids"]
    assert text_ids(tok, segment, "LLM").tolist() == want != segment.tolist()
