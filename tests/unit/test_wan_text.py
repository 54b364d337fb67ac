"""Wan's text encoder against transformers' ``UMT5EncoderModel``: a tiny random encoder saved by
transformers (``save_pretrained``) loads strictly into `UMT5Encoder` and gives the same states
for padded prompts of several lengths (relative buckets past ``max_distance`` included); the
pipeline's view zeroes the padding; umT5-XXL's parameters are named and shaped as
transformers'."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wgc_models.layers.loading import CheckpointError
from wgc_models.wan22.checkpoint import load_text_encoder
from wgc_models.wan22.text import (
    UMT5_XXL,
    TextConfigError,
    UMT5Config,
    UMT5Encoder,
)

transformers = pytest.importorskip("transformers")

TINY = {
    "vocab_size": 97,
    "d_model": 16,
    "d_kv": 4,
    "d_ff": 24,
    "num_layers": 2,
    "num_heads": 4,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 12,
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("text_encoder")
    torch.manual_seed(0)
    ref = transformers.UMT5EncoderModel(transformers.UMT5Config(**TINY)).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ref.save_pretrained(folder, safe_serialization=True)
    return ref, folder


def _batch():
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 97, (3, 30), generator=g)
    mask = torch.zeros(3, 30, dtype=torch.long)
    for row, n in enumerate((30, 17, 5)):
        mask[row, :n] = 1
    return ids * mask, mask


def test_states_equal_transformers(saved):
    ref, folder = saved
    ours = load_text_encoder(folder).eval()
    ids, mask = _batch()
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, mask)
        pipeline = ours.prompt_states(ids, mask)
    keep = mask.bool()
    assert (got - want)[keep].abs().max().item() <= 1e-5
    assert (pipeline - want * keep[..., None]).abs().max().item() <= 1e-5
    assert pipeline[2, 5:].abs().max().item() == 0.0


def test_strict_loading(saved, tmp_path: Path):
    from safetensors.torch import load_file, save_file

    _, folder = saved
    tensors = load_file(folder / "model.safetensors")
    tensors.pop("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight")
    save_file(tensors, tmp_path / "t.safetensors")
    with pytest.raises(CheckpointError, match="relative_attention_bias"):
        load_text_encoder(tmp_path / "t.safetensors", UMT5Config.from_folder(folder))


def test_other_feed_forwards_refused():
    with pytest.raises(TextConfigError, match="gated-gelu"):
        UMT5Config.from_dict({**TINY, "feed_forward_proj": "relu"})


def test_xxl_names_and_shapes():
    raw = {k: getattr(UMT5_XXL, k) for k in UMT5Config.__dataclass_fields__}
    with torch.device("meta"):
        ref = transformers.UMT5EncoderModel(transformers.UMT5Config(**raw))
        ours = UMT5Encoder(UMT5_XXL)
    want = {
        k: tuple(v.shape) for k, v in ref.state_dict().items() if k != "encoder.embed_tokens.weight"
    }
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == want
