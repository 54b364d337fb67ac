"""Effective params: the model's `param` values with placement `params:` and `--set` overrides.

The IR is built with the model's own values, and types, dims and loop bounds derive from them;
when an override changes a value the front end must run again with it (`rebuild_with_params`),
so a `param` that others derive from (`latent_tokens = latent_side * latent_side`) follows.
"""

from __future__ import annotations

from wgc.driver import Driver, FrontEndResult
from wgc.ir.expr import Value
from wgc.ir.model import Model
from wgc.placement.model import Placement


def overrides(placement: Placement | None, params: dict | None = None) -> dict[str, Value]:
    """Placement `params:` first, then ``params`` (the command line's `--set`) on top."""
    out: dict[str, Value] = {}
    if placement is not None:
        for p in placement.params:
            out[p.name] = p.value
    out.update(params or {})
    return out


def parse_value(text: str) -> Value:
    """A `--set NAME=VALUE` value: an int, a float, `true`/`false`, else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def needs_rebuild(model: Model, values: dict[str, Value]) -> bool:
    """True when an override names a param of ``model`` with a different value."""
    for name, v in values.items():
        p = model.param(name)
        if p is not None and (p.value != v or type(p.value) is not type(v)):
            return True
    return False


def rebuild_with_params(
    path: str, text: str | None, values: dict[str, Value], driver: Driver | None = None
) -> FrontEndResult:
    """Run the front end again with param ``values`` replacing the declared ones."""
    return (driver or Driver()).front_end(path, text, overrides=values)


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
