"""The request `wgc run` sends, checked at the door before any process starts.

``--option`` values are parsed as JSON-ish scalars (`wgc.cli.run_inputs.parse_value`), then read as
the option's declared type where that is what they mean (``1`` / ``0`` for a bool, ``3`` for a
float, any value for a str); with no ``--want``, every modality the model emits is wanted. The
request is then checked exactly as the conductor will check it (`wgc_runtime.core.conductor.door`,
strict, within the ``--limit``s: segment count, text length, array size), with the door's bounds
(token limits within ``kv_tokens``, sampling values, token ids within the vocabulary): a request
that cannot run is a user error (exit 1) listing every problem.
"""

from __future__ import annotations

import json
from typing import Any

from wgc.cli.errors import UserError


def at_the_door(
    plan_dir: str, inputs, want: tuple[str, ...], options: dict[str, Any], seed, limits=None
):
    """The request as `wgc run` sends it: ``--option`` values read as their declared types,
    every emitted modality wanted when none is; checked at the door (exit 1 with every
    problem) before any process starts."""
    from wgc_runtime.contract.flow import Segment
    from wgc_runtime.core.conductor.door import describe
    from wgc_runtime.host.admission import admit
    from wgc_runtime.host.loading import load_conductor

    spec = load_conductor(plan_dir)
    types = {o.name: str(o.type) for o in spec.options}
    options = {k: _typed(v, types.get(k)) for k, v in options.items()}
    want = want or spec.emits()
    # arrays stay numpy here: the door types them without torch (~1.5 s to import), which
    # `wgc run` imports while its processes start
    segments = [Segment(m, d, tuple(f.items())) for m, d, f in inputs]
    request = spec.request(segments, want, options)
    _, problems = admit(spec, request, strict=True, seed=seed, limits=limits)
    if problems:
        raise UserError(describe(problems).replace("bad request", "the request cannot run", 1))
    return want, options


def as_tensors(inputs) -> list[tuple[str, Any, dict[str, Any]]]:
    """``(modality, data, fields)`` segments with every array (data or field) a tensor."""
    import torch

    def t(v: Any) -> Any:
        return torch.as_tensor(v) if hasattr(v, "__array__") and not torch.is_tensor(v) else v

    return [(m, t(d), {k: t(v) for k, v in f.items()}) for m, d, f in inputs]


def _typed(value: Any, kind: str | None) -> Any:
    """A parsed ``--option`` value as option type ``kind`` where that is what it means."""
    if kind == "bool" and value in (0, 1) and not isinstance(value, bool):
        return bool(value)
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "str" and not isinstance(value, str) and value is not None:
        return json.dumps(value)
    return value
