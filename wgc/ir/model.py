"""The `Model`: one `.walk` file as typed IR. Frozen; lookups by name are O(1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span
from wgc.ir.decls import Node, OptionDecl, Param, Stream, TypeAlias
from wgc.ir.flow import Flow, Subflow
from wgc.ir.walk import Walk


def _first_by_name(items) -> dict:
    out: dict = {}
    for it in items:
        out.setdefault(it.name, it)
    return out


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
    _index: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        idx = {
            "param": _first_by_name(self.params),
            "type": _first_by_name(self.types),
            "option": _first_by_name(self.options),
            "node": _first_by_name(self.nodes),
            "stream": _first_by_name(self.streams),
            "walk": _first_by_name(self.walks),
            "flow": _first_by_name(self.flows),
            "subflow": _first_by_name(self.subflows),
        }
        producers: dict = {}
        consumers: dict = {}
        for s in self.streams:
            producers.setdefault((s.producer.node, s.producer.port), []).append(s)
            consumers.setdefault((s.consumer.node, s.consumer.port), []).append(s)
        idx["producer"] = producers
        idx["consumer"] = consumers
        object.__setattr__(self, "_index", idx)

    def param(self, name: str) -> Param | None:
        return self._index["param"].get(name)

    def type(self, name: str) -> TypeAlias | None:
        return self._index["type"].get(name)

    def option(self, name: str) -> OptionDecl | None:
        return self._index["option"].get(name)

    def node(self, name: str) -> Node | None:
        return self._index["node"].get(name)

    def stream(self, name: str) -> Stream | None:
        return self._index["stream"].get(name)

    def walk(self, name: str) -> Walk | None:
        return self._index["walk"].get(name)

    def flow(self, name: str) -> Flow | None:
        return self._index["flow"].get(name)

    def subflow(self, name: str) -> Subflow | None:
        return self._index["subflow"].get(name)

    def option_defaults(self, options: Mapping | None = None) -> dict:
        """Every option's default for a request that sets ``options``: a per-mode default
        follows its selector's value (the request's, or the selector's own default)."""
        given = dict(options or {})
        plain = {o.name: o.default for o in self.options if o.default_by is None}
        values = {**plain, **given}
        return {o.name: o.default_for(values) for o in self.options}

    def streams_from(self, node: str, port: str) -> list[Stream]:
        """Streams whose producer is ``node.port``."""
        return self._index["producer"].get((node, port), [])

    def streams_into(self, node: str, port: str) -> list[Stream]:
        """Streams whose consumer is ``node.port``."""
        return self._index["consumer"].get((node, port), [])

    def param_values(self) -> dict:
        return {p.name: p.value for p in self.params if p.value is not None}
