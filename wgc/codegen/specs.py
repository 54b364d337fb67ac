"""Plan records as `wgc_runtime.contract.spec` constructor expressions.

Each plan record class maps to one spec class with the same fields (the runtime's own types, kept
field-for-field equal so a generated ``RANK`` dumps to the plan's JSON). A field equal to the
spec class's default is left out, so the generated code shows only what matters. A plan field the
spec class lacks is a bug in wgc (the two drifted apart), reported loudly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from wgc.codegen import pyfmt
from wgc.codegen.pyfmt import Doc
from wgc.lower import plan as P
from wgc_runtime.contract import spec as S

# plan record -> spec class
SPEC_OF: dict[type, type] = {
    P.TypeSpec: S.TypeSpec,
    P.Source: S.Source,
    P.Dest: S.Dest,
    P.PortIn: S.PortIn,
    P.PortOut: S.PortOut,
    P.CallPlan: S.CallSpec,
    P.LoopPlan: S.LoopSpec,
    P.PiecePlan: S.PieceSpec,
    P.SinkPlan: S.SinkSpec,
    P.NodePlan: S.NodeSpec,
    P.StreamPlan: S.StreamSpec,
    P.CaptureEntry: S.CaptureSpec,
    P.MemoryEstimate: S.MemorySpec,
    P.RankPlan: S.RankSpec,
    P.WalkInputPlan: S.WalkInputSpec,
    P.WalkPlan: S.WalkSpec,
    P.Handoff: S.Handoff,
}

# a hook may replace how one field of one record renders (a reference to a constant, comments)
Hook = Callable[[object, str, object], Doc | None]


class SpecUsage:
    """The spec class names a module uses, for its import line."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def use(self, name: str) -> str:
        self.names.add(name)
        return name


def _default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def spec_doc(
    record: object, used: SpecUsage, hook: Hook | None = None, extra: Sequence = ()
) -> Doc:
    """The constructor call of ``record``'s spec class; ``extra`` adds (field, Doc) pairs."""
    cls = SPEC_OF.get(type(record))
    if cls is None:
        return _value_doc(record, used, hook)
    name = used.use(cls.__name__)
    plan_fields = {f.name for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    spec_fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = plan_fields - spec_fields.keys()
    if missing:
        raise AssertionError(f"spec {cls.__name__} lacks plan fields {sorted(missing)}")
    if cls is S.TypeSpec:  # short and everywhere: positional
        t = record
        return pyfmt.call(name, [pyfmt.string(t.dtype), pyfmt.literal(tuple(t.dims))])  # type: ignore[attr-defined]
    extras = dict(extra)
    kwargs = []
    for fname, f in spec_fields.items():
        if fname in extras:
            kwargs.append((fname, extras[fname]))
            continue
        if fname not in plan_fields:
            continue
        value = getattr(record, fname)
        if value == _default(f) and type(value) is type(_default(f)):
            continue
        custom = hook(record, fname, value) if hook else None
        kwargs.append((fname, custom if custom is not None else _value_doc(value, used, hook)))
    return pyfmt.call(name, kwargs=kwargs)


def _value_doc(value: object, used: SpecUsage, hook: Hook | None) -> Doc:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return spec_doc(value, used, hook)
    if isinstance(value, tuple | list):
        return pyfmt.tuple_([_value_doc(v, used, hook) for v in value])
    return pyfmt.literal(value)


def provenance_tuple(
    records: Sequence, used: SpecUsage, where: Callable[[str], str], hook: Hook | None = None
) -> Doc:
    """A tuple of records, each under a ``# file.walk:line`` comment from its ``source``."""
    docs = [spec_doc(r, used, hook) for r in records]
    comments = [[where(r.source)] if getattr(r, "source", "") else [] for r in records]
    return pyfmt.tuple_(docs, comments)
