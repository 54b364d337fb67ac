"""Audio inputs at the sample rate the served model reads them at.

A node that reads a walk input and declares ``config sample_rate`` (e.g. a speech
recogniser's ``frontend``: 16 kHz) says at what rate its audio is read; `input_rate` finds
it in the ranks. `to_rate` resamples every ``audio`` segment that carries its own
``sample_rate`` field (a WAV upload, an OpenAI realtime ``pcm16`` buffer, ``wgc run``'s WAV
file) to that rate with soxr (a windowed-sinc resampler, "HQ" quality) and rewrites the field,
so a model never reads 24 or 44.1 kHz samples as 16 kHz ones. A model that declares no input
rate gets its audio as it came.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import soxr
import torch

from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.kinds import SourceKind
from wgc_runtime.contract.spec import RankSpec

MIN_RATE, MAX_RATE = 1_000, 768_000  # what a sample rate may be (soxr's ratio stays sane)


class RateError(ValueError):
    """An input's sample rate cannot be read (out of `MIN_RATE`..`MAX_RATE`, not an int);
    ``index`` is its segment's, when known."""

    index: int | None = None


def input_rate(ranks: Iterable[RankSpec]) -> int | None:
    """The ``sample_rate`` config of the nodes that read a walk input (None when none declares
    one). Two different rates are refused: the host resamples every audio input to one."""
    rates: dict[int, str] = {}
    for rank in ranks:
        configs = {n.name: dict(n.config) for n in rank.nodes}
        for piece in rank.pieces:
            for call in piece.calls:
                rate = configs.get(call.node, {}).get("sample_rate")
                if isinstance(rate, int) and any(
                    p.src.kind is SourceKind.INPUT for p in call.inputs
                ):
                    rates.setdefault(rate, call.node)
    if len(rates) > 1:
        named = ", ".join(f"`{n}` {r} Hz" for r, n in sorted(rates.items()))
        raise RateError(f"the nodes that read audio inputs declare different rates ({named})")
    return next(iter(rates), None)


def resample(x: np.ndarray, rate: int, to: int, where: str) -> np.ndarray:
    """``x`` (f32 ``[samples]`` or ``[samples, channels]``) from ``rate`` to ``to`` Hz."""
    if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE <= rate <= MAX_RATE:
        raise RateError(
            f"{where}: a sample rate of {rate} Hz cannot be read ({MIN_RATE:,} to {MAX_RATE:,})"
        )
    if rate == to or x.shape[0] == 0:
        return x
    return soxr.resample(np.ascontiguousarray(x, np.float32), rate, to, quality="HQ")


def to_rate(segments: list[Segment], rate: int | None, where: str = "input") -> list[Segment]:
    """``segments`` with every ``audio*`` segment that has a ``sample_rate`` field at ``rate``
    (`at_rate`); the others (and all when ``rate`` is None) as they are."""
    if rate is None:
        return segments
    out = []
    for i, seg in enumerate(segments):
        try:
            data, fields = at_rate(seg.modality, seg.data, dict(seg.fields), rate, f"{where} {i}")
        except RateError as exc:
            exc.index = i
            raise
        same = data is seg.data
        out.append(seg if same else Segment(seg.modality, data, tuple(fields.items())))
    return out


def at_rate(
    modality: str, data: Any, fields: dict[str, Any], rate: int | None, where: str
) -> tuple[Any, dict[str, Any]]:
    """One input (``wgc run``'s (modality, data, fields)) at ``rate`` when it is audio with a
    ``sample_rate`` field (`resample`, the field rewritten), else as it is."""
    have = fields.get("sample_rate")
    if rate is None or not modality.startswith("audio") or have is None or have == rate:
        return data, fields
    return _resampled(data, have, rate, f"{where} ({modality})"), {**fields, "sample_rate": rate}


def _resampled(data: Any, have: Any, rate: int, where: str) -> Any:
    if isinstance(data, torch.Tensor):
        x = data.detach().cpu().to(torch.float32).numpy()
        return torch.from_numpy(resample(x, have, rate, where).copy())
    if isinstance(data, np.ndarray):
        return resample(data.astype(np.float32, copy=False), have, rate, where).copy()
    raise RateError(f"{where}: audio with a `sample_rate` is an array, not {type(data).__name__}")
