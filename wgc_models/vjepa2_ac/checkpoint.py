"""V-JEPA 2-AC's weights: ``config checkpoint`` is a folder with ``encoder/`` (a ``VJEPA2Model``
checkpoint, its names read under ``encoder.``) and ``predictor/model.safetensors`` (the AC
predictor's names), or the published training checkpoint (``vjepa2-ac-vitg.pt``, names under
DDP's ``module.`` and the wrapper's ``backbone.``); without one, seeded random weights at the
sizes ``config model`` names (`wgc_models.vjepa2_ac.config`). Each part is built once per
process (the predictor nodes share theirs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from wgc_models._shared.weights import part
from wgc_models.layers.convert import load_converted, load_tensors
from wgc_models.layers.loading import pickled_tensors
from wgc_models.layers.random_init import init_seeded
from wgc_models.vjepa2_ac.config import CONFIGS, VJEPA2ACConfig
from wgc_models.vjepa2_ac.model import ACPredictor
from wgc_models.vjepa2_ac.vjepa2 import VJEPA2Encoder
from wgc_runtime.contract.node import NodeError
from wgc_runtime.contract.weights import WeightParts

_Key = tuple[Any, ...]  # the config values and part a copy of the weights is built from
_WEIGHTS: dict[_Key, Any] = {}


def family_config(node: str, config: Mapping[str, Any]) -> VJEPA2ACConfig:
    name = str(config.get("model", "tiny"))
    if name not in CONFIGS:
        raise NodeError(f"node `{node}`: unknown V-JEPA 2-AC model `{name}` ({', '.join(CONFIGS)})")
    return CONFIGS[name]


def _weights(key: _Key, build: Callable[[], Any]) -> Any:
    """One copy per process of each part's weights (the predictor nodes share theirs)."""
    if key not in _WEIGHTS:
        _WEIGHTS[key] = build()
    return _WEIGHTS[key]


def load_encoder(node: str, config: Mapping[str, Any], device: torch.device) -> VJEPA2Encoder:
    cfg = family_config(node, config).encoder
    path, seed = str(config.get("checkpoint") or ""), int(config.get("seed", 0))

    def build() -> VJEPA2Encoder:
        model = VJEPA2Encoder(cfg)
        if path:
            load_converted(model, Path(path) / "encoder", prefix="encoder.")
        else:
            init_seeded(model, seed + 1)
        return model.to(device).eval()

    return _weights((config.get("model"), path, seed, "encoder", str(device)), build)


def load_predictor_weights(model: ACPredictor, path: Path) -> None:
    """``predictor/model.safetensors`` (the reference's names), else the published training
    checkpoint as Meta releases it (``vjepa2-ac-vitg.pt``: its ``predictor`` entry, names
    under DDP's ``module.`` and the wrapper's ``backbone.``, stripped as the reference's hub
    loader strips them), loaded strictly."""
    safetensors = path / "predictor" / "model.safetensors"
    if safetensors.is_file():
        load_converted(model, safetensors)
        return
    released = sorted(path.glob("*.pt")) + sorted((path / "predictor").glob("*.pt"))
    if not released:
        raise NodeError(
            f"checkpoint `{path}` has neither `predictor/model.safetensors` nor a released "
            f"`vjepa2-ac-vitg.pt` (docs/checkpoints.md)"
        )
    items = pickled_tensors(released[0], "predictor")
    clean = ((k.replace("module.", "").replace("backbone.", ""), v) for k, v in items)
    load_tensors(model, clean, source=f"{released[0]} (predictor)")


def load_predictor(node: str, config: Mapping[str, Any], device: torch.device) -> ACPredictor:
    cfg = family_config(node, config).predictor
    path, seed = str(config.get("checkpoint") or ""), int(config.get("seed", 0))

    def build() -> ACPredictor:
        model = ACPredictor(cfg)
        if path:
            load_predictor_weights(model, Path(path))
        else:
            init_seeded(model, seed + 2)
        return model.to(device).eval()

    return _weights((config.get("model"), path, seed, "predictor", str(device)), build)


def encoder_parts(config: Mapping[str, Any]) -> list[WeightParts]:
    cfg = family_config("video_encoder", config).encoder
    path = str(config.get("checkpoint") or "")
    where = str(Path(path) / "encoder") if path else ""
    return [part("vjepa2_ac", "encoder", config, lambda: VJEPA2Encoder(cfg), checkpoint=where)]


def predictor_parts(config: Mapping[str, Any]) -> list[WeightParts]:
    cfg = family_config("predictor", config).predictor
    path = str(config.get("checkpoint") or "")
    where = str(Path(path) / "predictor" / "model.safetensors") if path else ""
    return [part("vjepa2_ac", "predictor", config, lambda: ACPredictor(cfg), checkpoint=where)]
