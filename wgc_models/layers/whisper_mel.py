"""Whisper's log-mel front end (``transformers.WhisperFeatureExtractor``), which Qwen3-Omni's
processor puts before the audio encoder: 16 kHz audio → ``[mel_bins, frames]`` features, one
frame per 10 ms.

As the extractor computes them: a centred STFT (``n_fft`` 400, hop 160, a periodic Hann
window), the power spectrum without its last frame, Slaney-scale mel filters with Slaney
normalisation over 0–8 kHz, ``log10`` clamped at 1e-10, floored 8 below the maximum, then
``(x + 4) / 4``. The extractor pads a clip with zeros to 30 s and marks ``⌈samples / 160⌉``
frames valid; `log_mel` pads just enough zeros that every valid frame sees the same samples,
and returns only the valid frames.
"""

from __future__ import annotations

import math
from functools import cache

import torch

RATE, N_FFT, HOP = 16000, 400, 160


def _hz_to_mel(f: torch.Tensor) -> torch.Tensor:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    min_log_hz, min_log_mel, step = 1000.0, 15.0, 27.0 / math.log(6.4)
    lin = 3.0 * f / 200.0
    return torch.where(f >= min_log_hz, min_log_mel + torch.log(f / min_log_hz) * step, lin)


def _mel_to_hz(m: torch.Tensor) -> torch.Tensor:
    min_log_hz, min_log_mel, step = 1000.0, 15.0, math.log(6.4) / 27.0
    lin = 200.0 * m / 3.0
    return torch.where(m >= min_log_mel, min_log_hz * torch.exp(step * (m - min_log_mel)), lin)


@cache
def mel_filters(bins: int) -> torch.Tensor:
    """``[n_fft // 2 + 1, bins]`` triangular filters (``mel_filter_bank``, slaney/slaney)."""
    freqs = torch.linspace(0, RATE // 2, N_FFT // 2 + 1, dtype=torch.float64)
    lo, hi = (
        _hz_to_mel(torch.tensor(0.0, dtype=torch.float64)),
        _hz_to_mel(torch.tensor(8000.0, dtype=torch.float64)),
    )
    edges = _mel_to_hz(torch.linspace(float(lo), float(hi), bins + 2, dtype=torch.float64))
    diff = edges[1:] - edges[:-1]
    slopes = edges[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = torch.clamp(torch.minimum(down, up), min=0)
    filters = filters * (2.0 / (edges[2 : bins + 2] - edges[:bins]))[None]
    return filters.float()


def frames(samples: int) -> int:
    """Valid feature frames of a clip of ``samples`` samples."""
    return -(-samples // HOP)


def log_mel(audio: torch.Tensor, bins: int) -> torch.Tensor:
    """``audio`` ``[samples]`` at 16 kHz → ``[bins, frames(samples)]`` fp32 features."""
    x = audio.reshape(-1).float()
    n = frames(x.numel())
    if n == 0:
        return torch.zeros(bins, 0)
    x = torch.cat((x, x.new_zeros(2 * N_FFT)))  # the extractor's zero padding, far enough
    window = torch.hann_window(N_FFT, device=x.device)
    stft = torch.stft(x, N_FFT, HOP, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    mel = mel_filters(bins).to(x.device).T @ power
    log = torch.clamp(mel, min=1e-10).log10()
    log = torch.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0)[:, :n]
