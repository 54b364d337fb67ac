"""GPT-2's checkpoint: ``config.json`` as a `GPT2Config`, and the safetensors names as `model.py`'s.

The published ``openai-community/gpt2`` stores ``wte.weight``, ``wpe.weight``,
``h.{i}.ln_1.weight``, ``h.{i}.attn.c_attn.weight``, ..., ``ln_f.bias``; a ``GPT2LMHeadModel``
saved by transformers writes the same names under ``transformer.``. Its four projections per
layer are ``Conv1D``s, whose weights are stored ``[in, out]``: they are transposed here into
``nn.Linear``'s ``[out, in]``. Older exports also carry each layer's causal-mask buffers
(``h.{i}.attn.bias``, ``h.{i}.attn.masked_bias``), and a ``lm_head.weight`` is the token
embedding again (tied): both are skipped. Loading is strict: every missing, unexpected or
misshapen name is listed in one `CheckpointError`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from wgc_models.gpt2.model import GPT2, GPT2Config
from wgc_models.layers.loading import CheckpointError, iter_tensors

CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
SKIPPED = (".attn.bias", ".attn.masked_bias", "lm_head.weight")
GELU = ("gelu_new", "gelu_pytorch_tanh")  # the tanh approximation `model.py` computes


def read_config(path: str | Path) -> GPT2Config:
    """The sizes in the checkpoint folder's ``config.json``."""
    file = Path(path) / "config.json"
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read `{file}`: {exc}") from exc
    act = raw.get("activation_function", "gelu_new")
    if act not in GELU or raw.get("scale_attn_by_inverse_layer_idx"):
        raise CheckpointError(f"`{file}`: a GPT-2 variant this model does not compute ({act})")
    return GPT2Config(
        vocab=raw["vocab_size"],
        positions=raw["n_positions"],
        hidden=raw["n_embd"],
        layers=raw["n_layer"],
        heads=raw["n_head"],
        inner=raw.get("n_inner") or 0,
        eps=raw.get("layer_norm_epsilon", 1e-5),
    )


def converted(name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor] | None:
    """A checkpoint tensor under `model.py`'s name and layout, or None for one to skip."""
    name = name.removeprefix("transformer.")
    if name.endswith(SKIPPED):
        return None
    return name, tensor.t() if name.endswith(CONV1D) else tensor


def load(model: GPT2, path: str | Path) -> GPT2:
    """Fill ``model`` from the checkpoint folder ``path``, strictly."""
    target = model.state_dict()
    seen: set[str] = set()
    unexpected: list[str] = []
    shapes: list[str] = []
    with torch.no_grad():
        for raw_name, raw in iter_tensors(path):
            item = converted(raw_name, raw)
            if item is None:
                continue
            name, tensor = item
            if name not in target:
                unexpected.append(raw_name)
            elif tensor.shape != target[name].shape:
                shapes.append(f"{raw_name} {tuple(raw.shape)}")
            else:
                target[name].copy_(tensor)
            seen.add(name)
    missing = sorted(set(target) - seen)
    lines = [f"`{path}` is not a GPT-2 checkpoint of its config's sizes:"]
    for kind, names in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)):
        if names:
            lines.append(f"  {kind} ({len(names)}): {', '.join(names[:6])}")
    if len(lines) > 1:
        raise CheckpointError("\n".join(lines))
    return model
