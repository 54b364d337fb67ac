"""The examples' answers to `Node.weights`: what each family's nodes will hold, said before any
weight is built (`wgc_runtime.contract.weights`, checked by `wgc_runtime.host.preflight`).

Parameters are counted by building the family's module on the ``meta`` device (no memory, no
initialisation) at the sizes the node's config names; one parameter takes the bytes of the
node's compute dtype. A part with a checkpoint names the files and the tensor names it reads
there, so the launcher counts the published file instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from wgc_runtime.contract.weights import WeightParts

DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


class _EmptyOnMeta(TorchFunctionMode):
    """Module weights (made by ``torch.empty``, as every ``nn`` layer makes them) go to the meta
    device and random fills of them are skipped; the rest (rotary tables, small constants) is
    computed on the CPU as usual. Built under ``torch.device("meta")`` instead, those small
    computations would go through torch's reference kernels, whose first use imports dynamo
    (1.7 s on a loaded machine)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.empty:
            kwargs["device"] = "meta"
        elif getattr(func, "__name__", "") in _FILLS:
            target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        return func(*args, **kwargs)


_FILLS = frozenset(
    {"normal_", "uniform_", "trunc_normal_", "bernoulli_", "random_", "zero_", "fill_", "copy_"}
)


def meta_params(build: Callable[[], torch.nn.Module]) -> int:
    """The parameter count of the module ``build`` makes (its weights never allocated)."""
    with _EmptyOnMeta():
        module = build()
    return sum(p.numel() for p in module.parameters())


def part(
    family: str,
    name: str,
    config: Mapping[str, Any],
    build: Callable[[], torch.nn.Module],
    *,
    checkpoint: str | None = None,
    names: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    dtype: str | None = None,
) -> WeightParts:
    """One part of a family's weights: keyed by what makes two nodes share it in one process
    (the family, the part, the model, checkpoint, seed and dtype)."""
    path = str(config.get("checkpoint") or "")
    dt = dtype or str(config.get("dtype") or "f32")
    key = f"{family}:{name}:{config.get('model', '')}:{path}:{config.get('seed', 0)}:{dt}"
    return WeightParts(
        key=key,
        params=meta_params(build),
        dtype_bytes=DTYPE_BYTES.get(dt, 4),
        checkpoint=path if checkpoint is None else checkpoint,
        names=names,
        skip=skip,
    )
