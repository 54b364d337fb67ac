"""Effective params as lowering records them, and when an override needs a rebuilt IR.

The IR is built with the model's own `param` values, and types, dims and loop bounds derive from
them; when an override (placement `params:` or `--set`, resolved by `wgc.placement.params`)
changes a value, the driver runs the front end again with it (`needs_rebuild`), so a `param`
that others derive from (`latent_tokens = latent_side * latent_side`) follows.
"""

from __future__ import annotations

from wgc.ir.expr import Value
from wgc.ir.model import Model


def needs_rebuild(model: Model, values: dict[str, Value]) -> bool:
    """True when an override names a param of ``model`` with a different value."""
    for name, v in values.items():
        p = model.param(name)
        if p is not None and (p.value != v or type(p.value) is not type(v)):
            return True
    return False


def effective(model: Model, values: dict[str, Value]) -> tuple[tuple[str, object], ...]:
    """Every param of ``model`` with its effective value, in declaration order."""
    out = []
    seen = set()
    for p in model.params:
        if p.name in seen:
            continue
        seen.add(p.name)
        out.append((p.name, values.get(p.name, p.value)))
    return tuple(out)
