"""Contract records (`wgc_runtime.contract.spec`) as constructor expressions.

The plan is made of the runtime's own records, so a record renders as a call of its own class
with its fields as keywords; a field equal to the class's default is left out, so the generated
code shows only what matters. Kinds render as enum members (``InputMode.CARRIED``): a module
written against other kinds fails at import, never at run time. `SpecUsage` collects the names a
module uses, for its import lines.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Sequence
from enum import Enum

from wgc.codegen import pyfmt
from wgc.codegen.pyfmt import Doc
from wgc_runtime.contract.spec import TypeSpec

CONTRACT = "wgc_runtime.contract"

# a hook may replace how one field of one record renders (a reference to a constant, comments)
Hook = Callable[[object, str, object], Doc | None]


class SpecUsage:
    """The contract names a module uses, per contract module, for its import lines."""

    def __init__(self) -> None:
        self.names: dict[str, set[str]] = {}

    def use(self, name: str, module: str = "spec") -> str:
        self.names.setdefault(module, set()).add(name)
        return name

    def use_class(self, cls: type) -> str:
        return self.use(cls.__name__, public_module(cls))


@functools.cache
def public_module(cls: type) -> str:
    """The contract module a generated module imports ``cls`` from: the one it is defined in,
    or, for a record defined in a package's submodule (``spec.ports``), the package, which
    re-exports it (``spec``)."""
    module = cls.__module__
    if not module.startswith(CONTRACT + "."):
        raise AssertionError(f"`{cls.__qualname__}` is not a contract record ({module})")
    public = module.removeprefix(CONTRACT + ".").split(".")[0]
    if getattr(importlib.import_module(f"{CONTRACT}.{public}"), cls.__name__, None) is not cls:
        raise AssertionError(f"`{cls.__qualname__}` is not exported by `{CONTRACT}.{public}`")
    return public


def _default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def spec_doc(
    record: object, used: SpecUsage, hook: Hook | None = None, extra: Sequence = ()
) -> Doc:
    """The constructor call of ``record``; ``extra`` adds (field, Doc) pairs."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        return value_doc(record, used, hook)
    name = used.use_class(type(record))
    if isinstance(record, TypeSpec):  # short and everywhere: positional
        return pyfmt.call(name, [pyfmt.string(record.dtype), pyfmt.literal(tuple(record.dims))])
    extras = dict(extra)
    kwargs = []
    for f in dataclasses.fields(record):
        if f.name in extras:
            kwargs.append((f.name, extras[f.name]))
            continue
        value = getattr(record, f.name)
        default = _default(f)
        if value == default and type(value) is type(default):
            continue
        custom = hook(record, f.name, value) if hook else None
        kwargs.append((f.name, custom if custom is not None else value_doc(value, used, hook)))
    return pyfmt.call(name, kwargs=kwargs)


def value_doc(value: object, used: SpecUsage, hook: Hook | None = None) -> Doc:
    """A field value: a record, an enum member, a tuple of those, or a plain literal."""
    if isinstance(value, Enum):
        return pyfmt.Atom(f"{used.use_class(type(value))}.{value.name}")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return spec_doc(value, used, hook)
    if isinstance(value, tuple | list):
        return pyfmt.tuple_([value_doc(v, used, hook) for v in value])
    return pyfmt.literal(value)


def provenance_tuple(
    records: Sequence, used: SpecUsage, where: Callable[[str], str], hook: Hook | None = None
) -> Doc:
    """A tuple of records, each under a ``# file.walk:line`` comment from its ``source``."""
    docs = [spec_doc(r, used, hook) for r in records]
    comments = [[where(r.source)] if getattr(r, "source", "") else [] for r in records]
    return pyfmt.tuple_(docs, comments)
