"""The `Placement`: which rank runs which node (optionally per walk), plus serving settings.

Loaded from YAML by `wgc.placement.load` (wgc's own format, or M*'s `node_groups` configs,
normalised into the same records); checked against a `Model` by `wgc.placement.rules`.
Every record keeps the YAML span it came from, so placement errors point at the YAML line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span


@dataclass(frozen=True, slots=True)
class Named:
    """A name written in the YAML (a node, walk or param name) with its span."""

    name: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Group:
    """One `place:` entry (M*: one `node_groups:` entry): nodes on a rank group."""

    nodes: tuple[Named, ...]
    ranks: tuple[int, ...]
    walks: tuple[Named, ...] | None  # None: every walk
    tp: int
    span: Span = field(compare=False)
    ranks_span: Span | None = field(default=None, compare=False)
    tp_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class KvCache:
    page_size: int = 16
    pages: int = 1024
    dtype: str = "f32"
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Batching:
    max_batch: int = 16
    capture: tuple[int, ...] = (1, 2, 4, 8, 16)
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ParamOverride:
    name: str
    value: int | float | str | bool
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Placement:
    name: str  # the file stem: generated/<model>/<name>/
    file: str
    format: str  # "wgc" | "mstar"
    devices: tuple[str, ...]  # rank i runs on devices[i]
    hosts: tuple[tuple[int, str], ...]  # rank -> host, for multi-host runs; empty: one host
    groups: tuple[Group, ...]
    kv_cache: KvCache
    batching: Batching
    params: tuple[ParamOverride, ...]
    max_concurrent_requests: int
    attention: str  # "auto" | "torch" | "triton" | "flashinfer"
    span: Span = field(compare=False)

    @property
    def world_size(self) -> int:
        return len(self.devices)

    def host(self, rank: int) -> str:
        return dict(self.hosts).get(rank, "127.0.0.1")
