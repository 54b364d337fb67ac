"""Whisper's log-mel front end (`wgc_models.layers.whisper_mel`), which the Qwen3-Omni
audio encoder reads, equals ``transformers.WhisperFeatureExtractor``'s valid frames."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from wgc_models.layers.whisper_mel import frames, log_mel  # noqa: E402


@pytest.mark.parametrize("bins", [16, 128])
@pytest.mark.parametrize("samples", [160, 799, 1600, 12345, 48000])
def test_equals_the_feature_extractor(bins: int, samples: int) -> None:
    g = torch.Generator().manual_seed(samples)
    audio = 0.1 * torch.randn(samples, generator=g)
    fe = transformers.WhisperFeatureExtractor(feature_size=bins)
    ref = fe(audio.numpy(), sampling_rate=16000, return_attention_mask=True, return_tensors="pt")
    valid = int(ref["attention_mask"][0].sum())
    ours = log_mel(audio, bins)
    assert valid == frames(samples) == ours.shape[1]
    assert (ours - ref["input_features"][0, :, :valid]).abs().max().item() <= 1e-5
