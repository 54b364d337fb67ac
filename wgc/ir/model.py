"""The `Model`: one `.walk` file as typed IR. Frozen; lookups by name are O(1)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from wgc.diagnostics.diagnostic import Span
from wgc.ir.decls import Node, OptionDecl, Param, Stream, TypeAlias
from wgc.ir.expr import Value
from wgc.ir.flow import Flow, Subflow
from wgc.ir.walk import Walk

_N = TypeVar("_N", bound="_Named")


class _Named(Protocol):
    @property
    def name(self) -> str: ...


def _first_by_name(items: Iterable[_N]) -> dict[str, _N]:
    out: dict[str, _N] = {}
    for it in items:
        out.setdefault(it.name, it)
    return out


@dataclass(frozen=True, slots=True)
class _Index:
    """A model's declarations by name (the first of each name), and its streams by endpoint."""

    params: dict[str, Param]
    types: dict[str, TypeAlias]
    options: dict[str, OptionDecl]
    nodes: dict[str, Node]
    streams: dict[str, Stream]
    walks: dict[str, Walk]
    flows: dict[str, Flow]
    subflows: dict[str, Subflow]
    producers: dict[tuple[str, str], list[Stream]]
    consumers: dict[tuple[str, str], list[Stream]]


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    file: str
    params: tuple[Param, ...]
    types: tuple[TypeAlias, ...]
    options: tuple[OptionDecl, ...]
    nodes: tuple[Node, ...]
    streams: tuple[Stream, ...]
    walks: tuple[Walk, ...]
    flows: tuple[Flow, ...]
    span: Span = field(compare=False)
    subflows: tuple[Subflow, ...] = ()  # declared; their calls are already expanded in flows
    # options some dim reads (shape buckets), also where the dim did not build
    dim_options: frozenset[str] = field(default=frozenset(), compare=False)
    _index: _Index = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        producers: dict[tuple[str, str], list[Stream]] = {}
        consumers: dict[tuple[str, str], list[Stream]] = {}
        for s in self.streams:
            producers.setdefault((s.producer.node, s.producer.port), []).append(s)
            consumers.setdefault((s.consumer.node, s.consumer.port), []).append(s)
        idx = _Index(
            _first_by_name(self.params),
            _first_by_name(self.types),
            _first_by_name(self.options),
            _first_by_name(self.nodes),
            _first_by_name(self.streams),
            _first_by_name(self.walks),
            _first_by_name(self.flows),
            _first_by_name(self.subflows),
            producers,
            consumers,
        )
        object.__setattr__(self, "_index", idx)

    def param(self, name: str) -> Param | None:
        return self._index.params.get(name)

    def type(self, name: str) -> TypeAlias | None:
        return self._index.types.get(name)

    def option(self, name: str) -> OptionDecl | None:
        return self._index.options.get(name)

    def node(self, name: str) -> Node | None:
        return self._index.nodes.get(name)

    def stream(self, name: str) -> Stream | None:
        return self._index.streams.get(name)

    def walk(self, name: str) -> Walk | None:
        return self._index.walks.get(name)

    def flow(self, name: str) -> Flow | None:
        return self._index.flows.get(name)

    def subflow(self, name: str) -> Subflow | None:
        return self._index.subflows.get(name)

    def option_defaults(self, options: Mapping[str, Value] | None = None) -> dict[str, Value]:
        """Every option's default for a request that sets ``options``: a per-mode default
        follows its selector's value (the request's, or the selector's own default)."""
        given = dict(options or {})
        plain = {o.name: o.default for o in self.options if o.default_by is None}
        values = {**plain, **given}
        return {o.name: o.default_for(values) for o in self.options}

    def streams_from(self, node: str, port: str) -> list[Stream]:
        """Streams whose producer is ``node.port``."""
        return self._index.producers.get((node, port), [])

    def streams_into(self, node: str, port: str) -> list[Stream]:
        """Streams whose consumer is ``node.port``."""
        return self._index.consumers.get((node, port), [])

    def param_values(self) -> dict[str, Value]:
        return {p.name: p.value for p in self.params if p.value is not None}
