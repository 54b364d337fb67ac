"""BAGEL's release as ByteDance publishes it (``ByteDance-Seed/BAGEL-7B-MoT``), read into
`wgc_models.bagel.model`.

The release folder holds:

* ``ema.safetensors`` — the weights under BAGEL's ``Bagel`` module names (what this component
  is named after), one file; older exports and the tests' tiny folders may call it
  ``model.safetensors`` (`weights_file` takes either);
* ``llm_config.json`` (a ``Qwen2Config``: the backbone's sizes) and ``vit_config.json`` (a
  ``SiglipVisionConfig``) — BAGEL's loader then sets ``qk_norm`` and untied embeddings on the
  first, and drops the ViT's last layer (``num_hidden_layers - 1``: BAGEL reads the
  penultimate layer's output) and its rotary option on the second (the latent layout, 2×2
  latent patches, 64 latent positions and 70 ViT positions per side, is fixed in BAGEL's
  code: the named config's, `wgc_models.bagel.config`);
* ``ae.safetensors`` — FLUX's VAE under FLUX's own (LDM) names: ``encoder.down.{i}.block.{j}``,
  ``….mid.attn_1.{q,k,v,proj_out}`` as 1×1 convolutions, ``decoder.up.{i}`` counted from the
  lowest resolution, ``norm_out``; `ae_tensors` renames them to diffusers' ``AutoencoderKL``
  (what `wgc_models.bagel.autoencoder_kl` is named after; a diffusers ``vae/`` folder
  loads as it is).

One tensor differs in form: BAGEL runs the ViT on packed patches, so its release stores the
patch embedding as a ``Linear`` ``[hidden, p·p·3]`` — the convolution's weight permuted to
(out, row, column, channel) and flattened (BAGEL's ``convert_conv2d_to_linear``). It is read
back into the convolution it equals (`patch_embedding_as_conv`).

The nodes' parts (`load_bagel`: ``"llm"`` or ``"vit"``, `load_vae`) come from the release or from
seeded random weights at the named config's sizes, each built once per process (the LLM and its
CFG copies on one rank hold the backbone once); `bagel_parts` says what each will hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from wgc_models._shared.batched import cast_weights, weights_dtype
from wgc_models._shared.weights import part
from wgc_models.bagel.autoencoder_kl import AutoencoderKL, VaeConfig
from wgc_models.bagel.config import CONFIGS
from wgc_models.bagel.model import Bagel, BagelConfig
from wgc_models.bagel.qwen2_navit import MoTConfig
from wgc_models.layers.convert import load_converted, load_tensors
from wgc_models.layers.loading import CheckpointError, iter_tensors
from wgc_models.layers.random_init import init_seeded
from wgc_models.layers.siglip import SiglipConfig
from wgc_runtime.contract.node import NodeError
from wgc_runtime.contract.weights import WeightParts

RELEASE = "ema.safetensors"
PATCH = "vit_model.vision_model.embeddings.patch_embedding.weight"


def weights_file(path: str | Path) -> Path:
    """The release's weights file in the folder ``path``."""
    folder = Path(path)
    for name in (RELEASE, "model.safetensors"):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"no `{RELEASE}` (or `model.safetensors`) in `{folder}`")


def has_config(path: str | Path) -> bool:
    return (Path(path) / "llm_config.json").is_file()


def read_config(path: str | Path, base: BagelConfig) -> BagelConfig:
    """``base`` with the backbone's and the ViT's sizes of the release at ``path`` (its
    ``llm_config.json`` and ``vit_config.json``, as BAGEL's loader adjusts them: module
    docstring); the special tokens, the VAE and the latent layout stay ``base``'s."""
    folder = Path(path)
    try:
        llm = json.loads((folder / "llm_config.json").read_text())
        vit = json.loads((folder / "vit_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read BAGEL's configs in `{folder}`: {exc}") from exc
    llm = {**llm, "qk_norm": True, "tie_word_embeddings": False}
    vision = SiglipConfig.from_dict(vit)
    vision = replace(vision, num_hidden_layers=vision.num_hidden_layers - 1)
    return replace(base, llm=MoTConfig.from_dict(llm), vit=vision)


def patch_embedding_as_conv(weight: torch.Tensor, patch: int) -> torch.Tensor:
    """BAGEL's ``Linear`` patch embedding ``[hidden, p·p·C]`` as the ``Conv2d`` weight
    ``[hidden, C, p, p]`` it was flattened from (a convolution's weight passes unchanged)."""
    if weight.dim() == 4:
        return weight
    hidden = weight.shape[0]
    channels = weight.shape[1] // (patch * patch)
    return weight.reshape(hidden, patch, patch, channels).permute(0, 3, 1, 2).contiguous()


def release_tensors(path: str | Path, patch: int) -> Iterator[tuple[str, torch.Tensor]]:
    """The release's tensors under the component's names and forms."""
    for name, tensor in iter_tensors(weights_file(path)):
        if name == PATCH:
            tensor = patch_embedding_as_conv(tensor, patch)
        yield name, tensor


def select(
    items: Iterable[tuple[str, torch.Tensor]], skip: tuple[str, ...]
) -> Iterator[tuple[str, torch.Tensor]]:
    return ((n, t) for n, t in items if not n.startswith(skip))


# ------------------------------------------------------------------ the VAE: FLUX's own names
AE = "ae.safetensors"
_RESNET = {"nin_shortcut": "conv_shortcut"}
_ATTN = {"norm": "group_norm", "q": "to_q", "k": "to_k", "v": "to_v", "proj_out": "to_out.0"}


def ldm_vae_name(name: str, blocks: int) -> str:
    """A FLUX/LDM autoencoder name (``encoder.down.{i}.block.{j}.…``, ``….mid.attn_1.q``,
    ``decoder.up.{i}.upsample.conv``, ``norm_out``) as diffusers' ``AutoencoderKL`` names it;
    the decoder's ``up.{i}`` counts from the lowest resolution, diffusers' ``up_blocks`` from
    the highest (``blocks - 1 - i``)."""
    parts = name.split(".")
    side, rest = parts[0], parts[1:]
    if rest[:1] == ["norm_out"]:
        return ".".join([side, "conv_norm_out", *rest[1:]])
    if rest[:1] in (["down"], ["up"]):
        i = int(rest[1])
        stage = "down_blocks" if rest[0] == "down" else "up_blocks"
        index = i if rest[0] == "down" else blocks - 1 - i
        tail = rest[2:]
        if tail[0] == "block":
            layer = _RESNET.get(tail[2], tail[2])
            return ".".join([side, stage, str(index), "resnets", tail[1], layer, *tail[3:]])
        sampler = "downsamplers" if tail[0] == "downsample" else "upsamplers"
        return ".".join([side, stage, str(index), sampler, "0", *tail[1:]])
    if rest[:1] == ["mid"]:
        if rest[1].startswith("block_"):
            j = int(rest[1].removeprefix("block_")) - 1
            return ".".join([side, "mid_block", "resnets", str(j), *rest[2:]])
        if rest[1] == "attn_1":
            return ".".join([side, "mid_block", "attentions", "0", _ATTN[rest[2]], *rest[3:]])
    return name


def ae_tensors(path: str | Path, blocks: int) -> Iterator[tuple[str, torch.Tensor]]:
    """BAGEL's ``ae.safetensors`` under diffusers' names; the attention's 1×1 convolutions
    become the linear layers diffusers has."""
    for name, tensor in iter_tensors(Path(path) / AE):
        new = ldm_vae_name(name, blocks)
        if ".attentions.0.to_" in new and new.endswith(".weight") and tensor.dim() == 4:
            tensor = tensor[:, :, 0, 0]
        yield new, tensor


# The nodes' parts: each built once per process, from the release or seeded.

_LLM_PARTS = ("language_model.", "time_embedder.", "vae2llm.", "llm2vae.", "latent_pos_embed.")
_VIT_PARTS = ("vit_model.", "connector.", "vit_pos_embed.")
_WEIGHTS: dict[tuple[object, ...], Any] = {}


def bagel_config(node: str, config: Mapping[str, Any]) -> BagelConfig:
    """The named config; with a release folder as the checkpoint, its sizes from the release's
    ``llm_config.json`` / ``vit_config.json`` (above)."""
    name = str(config.get("model", "tiny"))
    if name not in CONFIGS:
        raise NodeError(f"node `{node}`: unknown BAGEL model `{name}` ({', '.join(CONFIGS)})")
    path = str(config.get("checkpoint") or "")
    if path and has_config(path):
        return read_config(path, CONFIGS[name])
    return CONFIGS[name]


def _weights(key: tuple[object, ...], build: Callable[[], Any]) -> Any:
    """One copy per process of the weights ``key`` names (model, checkpoint, seed, part,
    device): LLM and its CFG copies on one rank hold the backbone once."""
    if key not in _WEIGHTS:
        _WEIGHTS[key] = build()
    return _WEIGHTS[key]


def load_bagel(node: str, config: Mapping[str, Any], device: torch.device, part: str) -> Bagel:
    """The `Bagel` part ``"llm"`` or ``"vit"``: from ``config checkpoint``'s release
    (``ema.safetensors``), else seeded random weights."""
    cfg = bagel_config(node, config)
    path, seed = str(config.get("checkpoint") or ""), int(config.get("seed", 0))
    dtype = weights_dtype(config, node)

    def build() -> Bagel:
        model = Bagel(cfg, vit=part == "vit", llm=part == "llm")
        if path:
            skip = _VIT_PARTS if part == "llm" else _LLM_PARTS
            items = release_tensors(path, cfg.vit.patch_size)
            load_tensors(model, select(items, skip), source=f"{path} ({part})")
        else:
            init_seeded(model, seed + (1 if part == "llm" else 2), keep=("pos_embed",))
        return cast_weights(model.to(device), dtype).eval()

    return _weights((config.get("model"), path, seed, part, str(device), dtype), build)


def load_vae(node: str, config: Mapping[str, Any], device: torch.device) -> AutoencoderKL:
    cfg = bagel_config(node, config)
    path, seed = str(config.get("checkpoint") or ""), int(config.get("seed", 0))
    dtype = weights_dtype(config, node)

    def build() -> AutoencoderKL:
        vae_cfg = cfg.vae
        if path and (Path(path) / AE).is_file() and not (Path(path) / "vae").is_dir():
            model = AutoencoderKL(vae_cfg)  # the release's own file: FLUX's names, converted
            blocks = len(vae_cfg.block_out_channels)
            load_tensors(model, ae_tensors(path, blocks), source=f"{path}/{AE}")
        elif path:
            raw = json.loads((Path(path) / "vae" / "config.json").read_text())
            vae_cfg = VaeConfig.from_dict(raw)
            model = AutoencoderKL(vae_cfg)
            load_converted(model, Path(path) / "vae")
        else:
            model = AutoencoderKL(vae_cfg)
            init_seeded(model, seed + 3)
        return cast_weights(model.to(device), dtype).eval()

    return _weights((config.get("model"), path, seed, "vae", str(device), dtype), build)


def bagel_parts(node: str, config: Mapping[str, Any], part_name: str) -> list[WeightParts]:
    """What a node holding the part ``"llm"``, ``"vit"`` or ``"vae"`` will hold (`Node.weights`:
    the checkpoint's ``model.safetensors`` / ``vae/`` counted when given)."""
    cfg = bagel_config(node, config)
    path = str(config.get("checkpoint") or "")
    if part_name == "vae":
        where = str(Path(path) / "vae") if path else ""
        if path and not Path(where).is_dir():
            where = str(Path(path) / AE)
        return [part("bagel", "vae", config, lambda: AutoencoderKL(cfg.vae), checkpoint=where)]
    where = str(weights_file(path)) if path else ""
    names = _LLM_PARTS if part_name == "llm" else _VIT_PARTS

    def build() -> Bagel:
        return Bagel(cfg, vit=part_name == "vit", llm=part_name == "llm")

    return [part("bagel", part_name, config, build, checkpoint=where, names=names)]
