"""Loading a checkpoint whose names need converting: a sub-model's prefix, per-expert MoE
weights, and legacy weight-norm names.

`wgc_models.layers.loading.load_checkpoint` matches names one to one. The speech models'
checkpoints need three conversions on the way, all by name, streamed tensor by tensor:

* **prefix** — one checkpoint holds several sub-models (Qwen3-Omni's ``thinker.``, ``talker.``,
  ``code2wav.``): keep the names under one prefix, strip it, rename sub-trees whose layout
  moved between versions (transformers 5's ``model.language_model.`` is the released
  ``model.``), and skip listed sub-trees (the vision tower when a component leaves it out);
* **experts** — the released Qwen3-Omni checkpoints (and ``save_pretrained`` of transformers 5,
  which writes the original format) store each expert apart: ``….mlp.experts.{e}.gate_proj
  .weight`` / ``up_proj`` / ``down_proj``. The MoE components hold them fused like transformers
  5's runtime modules (``….mlp.experts.gate_up_proj`` ``[experts, 2·inter, hidden]``: gate rows
  then up rows; ``….mlp.experts.down_proj`` ``[experts, hidden, inter]``), the same merge as
  transformers' ``qwen2_moe`` weight converter. Both spellings load;
* **weight norm** — ``torch.nn.utils.weight_norm`` (older SNAC checkpoints) saved
  ``….weight_g`` / ``….weight_v``; ``torch.nn.utils.parametrizations.weight_norm`` names them
  ``….parametrizations.weight.original0`` / ``original1``. Both load.

Loading is strict like `load_checkpoint`: every missing, unexpected or mis-shaped name is
listed in one `CheckpointError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch

from wgc_models.layers.loading import (
    CheckpointError,
    checkpoint_files,
    iter_tensors,
    open_safetensors,
)

_EXPERT = re.compile(
    r"^(?P<base>.*\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$"
)
_LEGACY_WN = {
    "weight_g": "parametrizations.weight.original0",
    "weight_v": "parametrizations.weight.original1",
}
_SHOWN = 8


def select(
    items: Iterable[tuple[str, torch.Tensor]],
    prefix: str = "",
    skip: Iterable[str] = (),
    renames: Sequence[tuple[str, str]] = (),
) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors under ``prefix`` (stripped), with the first matching ``(old, new)`` name
    prefix of ``renames`` replaced, leaving out names then under any of ``skip``."""
    skip = tuple(skip)
    for name, tensor in items:
        if not name.startswith(prefix):
            continue
        name = name[len(prefix) :]
        for old, new in renames:
            if name.startswith(old):
                name = new + name[len(old) :]
                break
        if skip and name.startswith(skip):
            continue
        yield name, tensor


def legacy_weight_norm(items: Iterable[tuple[str, torch.Tensor]]):
    """``….weight_g`` / ``….weight_v`` renamed to the parametrization names."""
    for name, tensor in items:
        head, _, last = name.rpartition(".")
        if last in _LEGACY_WN:
            name = f"{head}.{_LEGACY_WN[last]}" if head else _LEGACY_WN[last]
        yield name, tensor


def merge_experts(items: Iterable[tuple[str, torch.Tensor]]):
    """Per-expert MoE weights merged into the fused ``gate_up_proj`` / ``down_proj`` tensors
    (emitted once a block's experts are all read: the end of the stream); other names pass."""
    parts: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for name, tensor in items:
        m = _EXPERT.match(name)
        if m is None:
            yield name, tensor
            continue
        parts.setdefault(m["base"], {}).setdefault(m["proj"], {})[int(m["e"])] = tensor
    for base, projs in parts.items():
        gate, up, down = (projs.get(p, {}) for p in ("gate_proj", "up_proj", "down_proj"))
        n = 1 + max(max(d, default=-1) for d in (gate, up, down))
        if not all(len(d) == n for d in (gate, up, down)):
            raise CheckpointError(f"`{base}`: experts' gate/up/down weights are incomplete")
        yield f"{base}.gate_up_proj", torch.stack([torch.cat((gate[e], up[e])) for e in range(n)])
        yield f"{base}.down_proj", torch.stack([down[e] for e in range(n)])


def load_tensors(
    module: torch.nn.Module,
    items: Iterable[tuple[str, torch.Tensor]],
    *,
    source: str,
    optional: Iterable[str] = (),
) -> None:
    """Copy ``items`` into ``module``'s state by name, strictly (``source`` names the
    checkpoint in errors; ``optional`` names keys that may be absent on either side)."""
    target = module.state_dict()
    optional = set(optional)
    seen: set[str] = set()
    unexpected: list[str] = []
    shapes: list[str] = []
    with torch.no_grad():
        for name, tensor in items:
            if name.endswith(".rotary_emb.inv_freq"):
                continue
            dst = target.get(name)
            if dst is None:
                if name not in optional:
                    unexpected.append(name)
                continue
            seen.add(name)
            if tuple(dst.shape) != tuple(tensor.shape):
                shapes.append(f"{name}: checkpoint {tuple(tensor.shape)}, model {tuple(dst.shape)}")
                continue
            dst.copy_(tensor.to(dtype=dst.dtype))
    missing = sorted(set(target) - seen - optional)
    if missing or unexpected or shapes:
        lines = [f"checkpoint `{source}` does not fit the model:"]
        for title, names in (
            ("missing keys", missing),
            ("unexpected keys", sorted(unexpected)),
            ("shape mismatches", shapes),
        ):
            if names:
                more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
                shown = ", ".join(f"`{n}`" for n in names[:_SHOWN])
                lines.append(f"  {title} ({len(names)}): {shown}{more}")
        raise CheckpointError("\n".join(lines))


def load_converted(
    module: torch.nn.Module,
    path: str | Path,
    *,
    prefix: str = "",
    skip: Iterable[str] = (),
    renames: Sequence[tuple[str, str]] = (),
    optional: Iterable[str] = (),
) -> None:
    """Load the checkpoint at ``path`` into ``module``: the names under ``prefix`` (renamed,
    minus the ``skip`` sub-trees), per-expert weights merged, legacy weight-norm names
    renamed."""
    items = select(iter_tensors(path), prefix, skip, renames)
    items = merge_experts(legacy_weight_norm(items))
    load_tensors(
        module, items, source=f"{path}" + (f" ({prefix}*)" if prefix else ""), optional=optional
    )


def read_tensor(path: str | Path, names: Sequence[str]) -> torch.Tensor:
    """The first of ``names`` the checkpoint holds (reading only that tensor)."""
    for file in checkpoint_files(path):
        with open_safetensors(file) as f:
            keys = set(f.keys())
            for name in names:
                if name in keys:
                    return f.get_tensor(name)
    raise CheckpointError(f"checkpoint `{path}` has none of {', '.join(f'`{n}`' for n in names)}")
