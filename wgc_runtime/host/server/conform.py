"""Request segments shaped for the walk inputs they feed (`conform`): the OpenAI routes send a
picture where the model takes frames, so a missing leading dim of size 1 (or symbolic) is added.
"""

from __future__ import annotations

import torch

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import Segment
from wgc_runtime.core.conductor.door import dry_run


def conform(spec: ConductorSpec, segments: list[Segment], want: list[str]) -> list[Segment]:
    """Segments shaped for the walk inputs they feed where only leading dims are missing (an
    image ``u8[H, W, 3]`` fed to ``u8[F, H, W, 3]`` becomes one frame): the OpenAI routes send
    a picture, not the model's layout."""
    out = list(segments)
    for feed in dry_run(spec, spec.request(segments, want)).feeds:
        seg = out[feed.index]
        data = seg.data
        if feed.field is not None or feed.type is None or not isinstance(data, torch.Tensor):
            continue
        missing = len(feed.type.dims) - data.dim()
        if missing > 0 and all(d == 1 or isinstance(d, str) for d in feed.type.dims[:missing]):
            shaped = data.reshape((1,) * missing + tuple(data.shape))
            out[feed.index] = Segment(seg.modality, shaped, seg.fields)
    return out
