"""Load weights from a Hugging Face-style safetensors checkpoint by parameter name.

A checkpoint folder holds either one ``model.safetensors`` or a sharded set listed by
``model.safetensors.index.json`` (``weight_map``: parameter name -> shard file), or, as some
releases still publish (SNAC's), one pickled ``pytorch_model.bin``, read with
``torch.load(weights_only=True)``. Tensors are
matched to a module's ``state_dict`` by name, so a component whose submodules are named like the
Hugging Face model (``model.layers.{i}.self_attn.q_proj.weight``, ...) loads without a mapping
table. Loading is strict: a missing key, an unexpected key or a shape mismatch raises
`CheckpointError` listing every problem at once (a partial load would produce plausible-looking
garbage). Keys a checkpoint may carry without meaning anything (rotary ``inv_freq`` buffers
older exports saved) are skipped; a tied ``lm_head.weight`` may be present or absent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, cast

import torch
from safetensors import safe_open

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# saved by some exporters, recomputed by us
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_SHOWN = 8  # how many names an error lists per kind before "and N more"


class CheckpointError(ValueError):
    """The checkpoint does not fit the module (or cannot be read)."""


class SafetensorsFile(Protocol):
    """What we read of an open safetensors file (safetensors ships no types for it)."""

    def keys(self) -> list[str]: ...

    def get_tensor(self, name: str) -> torch.Tensor: ...


def open_safetensors(file: str | Path) -> AbstractContextManager[SafetensorsFile]:
    """``safe_open`` on the CPU, typed."""
    return cast(
        AbstractContextManager[SafetensorsFile],
        safe_open(str(file), framework="pt", device="cpu"),
    )


def checkpoint_files(path: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint folder (or a single ``.safetensors`` file)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if (path / INDEX).is_file():
        index = json.loads((path / INDEX).read_text())
        shards = sorted(set(index.get("weight_map", {}).values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise CheckpointError(f"`{path / INDEX}` names missing shards: {', '.join(missing)}")
        return [path / s for s in shards]
    if (path / SINGLE).is_file():
        return [path / SINGLE]
    found = sorted(p.name for p in path.glob("*.safetensors")) if path.is_dir() else []
    if found:
        return [path / name for name in found]
    raise CheckpointError(f"no `{SINGLE}` or `{INDEX}` in `{path}`")


PICKLED = "pytorch_model.bin"


def pickled_file(path: str | Path) -> Path | None:
    """A checkpoint published as PyTorch's pickle (``pytorch_model.bin``, or a ``.bin`` /
    ``.pt`` file named directly) where there is no safetensors file."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix in (".bin", ".pt", ".pth") else None
    if (path / PICKLED).is_file() and not any(path.glob("*.safetensors")):
        return path / PICKLED
    return None


def iter_tensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Every (name, tensor) of the checkpoint, shard by shard (on the CPU). A pickled
    checkpoint is read with ``torch.load(weights_only=True)``: tensors and plain containers
    only, never code (a file holding anything else is refused by torch, reported here)."""
    pickled = pickled_file(path)
    if pickled is not None:
        yield from pickled_tensors(pickled)
        return
    for file in checkpoint_files(path):
        with open_safetensors(file) as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                yield name, f.get_tensor(name)


def pickled_tensors(file: Path, entry: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of a pickled checkpoint (``torch.load(weights_only=True)``, memory-mapped):
    the state dict itself, its ``state_dict`` entry, or the entry ``entry`` of a training
    checkpoint that holds several (V-JEPA 2-AC's ``encoder`` / ``predictor``)."""
    try:
        loaded: object = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch's unpickler refuses anything but tensors and containers
        raise CheckpointError(f"cannot read `{file}` as a state dict of tensors: {exc}") from exc
    state = _as_dict(loaded)
    if entry:
        inner = _as_dict(state.get(entry)) if state is not None else None
        if inner is None:
            raise CheckpointError(f"`{file}` has no `{entry}` state dict")
        state = inner
    elif state is not None and (inner := _as_dict(state.get("state_dict"))) is not None:
        state = inner  # a training checkpoint's weights
    if state is None:
        raise CheckpointError(f"`{file}` holds a {type(loaded).__name__}, not a state dict")
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor):
            yield str(name), tensor


def _as_dict(value: object) -> dict[object, object] | None:
    return cast(dict[object, object], value) if isinstance(value, dict) else None


def load_checkpoint(
    module: torch.nn.Module, path: str | Path, *, optional: Iterable[str] = ()
) -> None:
    """Copy the checkpoint at ``path`` into ``module``'s parameters and buffers, by name.

    ``optional`` names keys of the module the checkpoint may leave out (a tied ``lm_head``);
    a checkpoint key the module lacks is accepted only if it is in ``optional`` too.
    """
    target = module.state_dict()
    optional = set(optional)
    seen: set[str] = set()
    unexpected: list[str] = []
    shapes: list[str] = []
    with torch.no_grad():
        for name, tensor in iter_tensors(path):
            if name.endswith(_IGNORED_SUFFIXES):
                continue
            if name not in target:
                if name not in optional:
                    unexpected.append(name)
                continue
            dst = target[name]
            if tuple(dst.shape) != tuple(tensor.shape):
                shapes.append(f"{name}: checkpoint {tuple(tensor.shape)}, model {tuple(dst.shape)}")
                seen.add(name)  # present, just the wrong shape: not also "missing"
                continue
            dst.copy_(tensor.to(dtype=dst.dtype))
            seen.add(name)
    missing = sorted(set(target) - seen - optional)
    if missing or unexpected or shapes:
        raise CheckpointError(_problems(path, missing, sorted(unexpected), shapes))


def _problems(path: str | Path, missing: list[str], unexpected: list[str], shapes: list[str]):
    lines = [f"checkpoint `{path}` does not fit the model:"]
    for title, names in (
        ("missing keys", missing),
        ("unexpected keys", unexpected),
        ("shape mismatches", shapes),
    ):
        if names:
            shown = ", ".join(f"`{n}`" for n in names[:_SHOWN])
            more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
            lines.append(f"  {title} ({len(names)}): {shown}{more}")
    return "\n".join(lines)
