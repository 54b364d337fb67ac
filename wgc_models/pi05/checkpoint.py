"""π0.5 checkpoints as openpi and LeRobot publish them, loaded into `wgc_models.pi05.model`.

The published layouts (names as the two projects' PyTorch models save themselves):

* **openpi** (``PI0Pytorch``, ``model.safetensors`` of a converted checkpoint):
  ``paligemma_with_expert.paligemma.model.vision_tower.vision_model.…`` (transformers 4.53's
  ``SiglipVisionModel``), ``….paligemma.model.multi_modal_projector.linear.…``,
  ``….paligemma.model.language_model.{embed_tokens, layers.{i}.…, norm}`` (a ``GemmaModel``),
  ``paligemma_with_expert.gemma_expert.model.{layers.{i}.…, norm}`` (the expert, whose norms are
  adaptive: ``….input_layernorm.dense``), ``paligemma_with_expert.gemma_expert.lm_head`` (an
  unused head the expert's ``GemmaForCausalLM`` carries), ``action_in_proj``,
  ``action_out_proj``, ``time_mlp_in``, ``time_mlp_out``;
* **LeRobot** (``PI05Policy``, e.g. ``lerobot/pi05_base``): the same names under ``model.``;
  its safetensors keeps the PaliGemma head ``….paligemma.lm_head.weight`` and leaves out the
  token embedding tied to it (LeRobot ties them again when it loads).

This component names its modules like transformers' ``PI0ForConditionalGeneration``
(``….language_model.model.…``, ``….vision_tower.embeddings…``), so `published_names` maps a
published name to it; names already in that layout pass unchanged, so all three load. Loading
stays strict (`wgc_models.layers.convert.load_tensors`): every missing or unexpected name
is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from wgc_models.layers.convert import load_tensors
from wgc_models.layers.loading import checkpoint_files, iter_tensors, open_safetensors

_PALI = "paligemma_with_expert.paligemma."
_LM = f"{_PALI}model.language_model."
_VISION = f"{_PALI}model.vision_tower."
EMBED = f"{_LM}model.embed_tokens.weight"
# what the published files hold beside the policy's weights: heads tied to an embedding or never
# used (the expert has no vocabulary of its own)
UNUSED = (f"{_PALI}lm_head.weight", "paligemma_with_expert.gemma_expert.lm_head.weight")
_ROOTS = ("paligemma_with_expert.", "action_in_proj.", "action_out_proj.", "time_mlp_")


def published_name(name: str) -> str:
    """The component's name of one published tensor name (openpi's, LeRobot's, or its own)."""
    if name.startswith("model.") and name[6:].startswith(_ROOTS):
        name = name[6:]  # LeRobot's policy wrapper
    if name.startswith(f"{_VISION}vision_model."):
        return _VISION + name[len(_VISION) + len("vision_model.") :]
    if name.startswith(_LM) and not name.startswith(f"{_LM}model."):
        return f"{_LM}model.{name[len(_LM) :]}"
    return name


def checkpoint_names(path: str | Path) -> set[str]:
    """Every tensor name of a safetensors checkpoint, read from the headers only."""
    names: set[str] = set()
    for file in checkpoint_files(path):
        with open_safetensors(file) as f:
            names.update(f.keys())
    return names


def published_tensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's tensors under the component's names. Where the file has no token
    embedding but the PaliGemma head tied to it (LeRobot's files), the head is the embedding."""
    names = {published_name(n) for n in checkpoint_names(path)}
    head_is_embedding = EMBED not in names and f"{_PALI}lm_head.weight" in names
    for name, tensor in iter_tensors(path):
        name = published_name(name)
        if head_is_embedding and name == f"{_PALI}lm_head.weight":
            name = EMBED
        yield name, tensor


def load_published(
    module: torch.nn.Module,
    path: str | Path,
    *,
    prefix: str = "",
    skip: Iterable[str] = (),
) -> None:
    """Load a published π0.5 checkpoint into ``module`` strictly: the names under ``prefix``
    (stripped; ``PaliVision`` is the tree under ``….paligemma.model.``), minus ``skip``."""
    skip = tuple(skip)

    def items() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in published_tensors(path):
            if not name.startswith(prefix) or name in UNUSED:
                continue
            name = name[len(prefix) :]
            if not (skip and name.startswith(skip)):
                yield name, tensor

    load_tensors(module, items(), source=f"{path}" + (f" ({prefix}*)" if prefix else ""))
