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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import torch

from wgc_models.bagel.model import BagelConfig
from wgc_models.bagel.qwen2_navit import MoTConfig
from wgc_models.layers.loading import CheckpointError, iter_tensors
from wgc_models.layers.siglip import SiglipConfig

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
