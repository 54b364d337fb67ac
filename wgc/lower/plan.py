"""The `Plan`: what lowering a verified `Model` against a `Placement` produces, as plain data.

The records the runtime executes are the runtime's own (`wgc_runtime.contract.spec`): lowering
builds them directly, codegen renders them as constructor calls, and ``plan.json`` dumps them, so
the contract is defined once. This module adds only what the compiler's tools need beside them:
the route table and the cross-rank transfers (`wgc show --placement`), the source files and their
hashes (banners), and the lowered flows (`FlowPlan`, see `wgc.lower.flowplan`) that codegen
renders into the conductor's generator functions.

``Plan.to_json`` is the stable contract for tools: deterministic (sorted keys, 2-space indent)
and versioned (``"version"``: `SPEC_VERSION`). The vocabulary (pieces, input modes, destinations,
edge kinds) is the spec module's and docs/plan.md's.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import Enum

from wgc.lower import flowplan
from wgc.lower.flowplan import FlowPlan
from wgc_runtime.contract.conductor import KvBudget, OptionSpec, SegmentSpec, WalkSpec
from wgc_runtime.contract.spec import (
    SPEC_VERSION,
    AttentionSpec,
    BatchingSpec,
    Dest,
    KvCacheSpec,
    RankSpec,
    StreamSpec,
)


@dataclass(frozen=True, slots=True)
class Route:
    """One row of the route table: (walk, node, channel) produced on ``rank`` -> destinations."""

    walk: str
    rank: int
    call: int
    node: str
    port: str
    channel: str
    dests: tuple[Dest, ...]


@dataclass(frozen=True, slots=True)
class Transfer:
    """A cross-rank hop, with its byte size per occurrence (None when the shape is dynamic).

    One row per (producer port, destination rank, edge kind): two consumers on one rank share
    the hop. ``per`` is "iteration" when the hop recurs every iteration of ``loop`` (the innermost
    loop enclosing both ends), else "request" (once per walk instance).
    """

    walk: str
    channel: str
    src_rank: int
    dst_rank: int
    edge: str  # an `Edge`, or "kv_copy" (a KV label copied before the walk)
    per: str  # "request" | "iteration"
    loop: str | None
    nbytes: int | None
    call: int | None = None  # the producing call
    port: str | None = None  # for a "kv_copy": the node that owns the cache


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str
    sha256: str


@dataclass(frozen=True, slots=True)
class Plan:
    """One (model, placement), lowered: every rank's `RankSpec`, the conductor's walks, flows
    and streams, the serving settings, and the tools' tables."""

    model: str
    placement: str  # the placement's name (its file stem)
    sources: tuple[SourceFile, ...]
    params: tuple[tuple[str, object], ...]  # effective values after placement/--set overrides
    options: tuple[OptionSpec, ...]
    ranks: tuple[RankSpec, ...]
    walks: tuple[WalkSpec, ...]
    flows: tuple[FlowPlan, ...]
    streams: tuple[StreamSpec, ...]  # every stream (each rank holds the ones it owns)
    routes: tuple[Route, ...]
    transfers: tuple[Transfer, ...]
    placed: tuple[str, ...]  # nodes placed on some rank (for `placed(NODE)` in flows)
    kv_cache: KvCacheSpec
    batching: BatchingSpec
    attention: AttentionSpec
    max_concurrent_requests: int
    segments: tuple[SegmentSpec, ...] = ()  # the input modalities the flows take
    any_segment: bool = True  # some flow takes segments of any modality
    kv_budgets: tuple[KvBudget, ...] = ()  # every KV pool, for admission by pages
    version: int = SPEC_VERSION

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def rank(self, r: int) -> RankSpec:
        return self.ranks[r]

    def walk(self, name: str) -> WalkSpec | None:
        return next((w for w in self.walks if w.name == name), None)

    def to_dict(self) -> dict:
        """Like `dataclasses.asdict` (nested records become dicts, tuples stay tuples, enums
        become their values, flow statements and conditions name their record in ``"node"``),
        without its deep copies: plans of 10,000-node models dump in a
        fraction of the time."""
        return _plain(self)  # type: ignore[return-value]

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, 2-space indent, trailing newline)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"


def plain(obj: object) -> object:
    """A record as ``plan.json`` writes it (`Plan.to_dict`'s rules, for one record)."""
    return _plain(obj)


_FIELDS: dict[type, tuple[str, ...]] = {}
_OPTIONAL: dict[type, dict[str, object]] = {}  # fields dumped only when not their default


def _plain(obj: object) -> object:
    cls = type(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELDS.get(cls)
        if names is None:
            names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(obj))
            _OPTIONAL[cls] = {
                f.name: f.default for f in dataclasses.fields(obj) if f.metadata.get("omit_default")
            }
        optional = _OPTIONAL[cls]
        out = {
            n: _plain(getattr(obj, n))
            for n in names
            if n not in optional or getattr(obj, n) != optional[n]
        }
        if cls.__module__ == flowplan.__name__:  # flow records are a tree: say which node
            out = {"node": cls.__name__, **out}
        return out
    if cls is tuple or cls is list:
        return cls(_plain(x) for x in obj)  # type: ignore[attr-defined]
    if isinstance(obj, Enum):
        return obj.value
    return obj
