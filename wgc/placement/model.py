"""The `Placement`: which rank runs which node (optionally per walk), plus serving settings.

Loaded from YAML by `wgc.placement.load` (wgc's own format, or M*'s `node_groups` configs,
normalised into the same records); checked against a `Model` by `wgc.placement.rules`.
Every record keeps the YAML span it came from, so placement errors point at the YAML line.

Devices are `cpu`, `cuda`, `cuda:N` or `auto:N`; `auto:N` (what M* configs, which name no
devices, get for rank N) means `cuda:N` where CUDA is available and `cpu` elsewhere: the
runtime decides when it starts, so one compiled plan runs on a GPU box and a laptop alike.
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
    # sequence parallelism: the group's ranks split each call's sequence, like `tp` its weights
    sp: int = 1
    # M*'s `residency`: `resident` (loaded once), `on_demand` (loaded when first needed) or
    # `reload` (unloaded between uses); the runtime keeps every node resident (WG823)
    residency: str = "resident"
    rank_spans: tuple[Span, ...] = field(default=(), compare=False)  # one per entry of ``ranks``
    # the names of ``nodes`` and ``walks`` as sets: `places` is asked for every (walk, node) of
    # the model and every group, so a scan of ``nodes`` made placement quadratic
    node_names: frozenset[str] = field(init=False, compare=False, repr=False)
    walk_names: frozenset[str] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_names", frozenset(n.name for n in self.nodes))
        walks = None if self.walks is None else frozenset(w.name for w in self.walks)
        object.__setattr__(self, "walk_names", walks)

    def places(self, walk: str, node: str) -> bool:
        """Whether this group runs ``node`` when ``walk`` calls it."""
        if self.walk_names is not None and walk not in self.walk_names:
            return False
        return node in self.node_names


@dataclass(frozen=True, slots=True)
class KvCache:
    page_size: int = 16
    pages: int = 1024
    dtype: str = "f32"
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Sessions:
    """``sessions:``: sessions kept per rank (0: off) and parked pages per pool (0: any)."""

    max_sessions: int = 0
    max_pages: int = 0
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PieceRestart:
    """One piece's policy in ``on_restart:``: walk ``walk``'s piece on rank ``rank``."""

    walk: str
    rank: int
    policy: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Restarts:
    """``on_restart:``: what a worker's restart does to the requests in flight on each walk's
    pieces there, ``fail`` or ``replay`` (`wgc.placement.restarts`); ``walks``: the walks named,
    each with its policy (its pieces' default); ``pieces``: the pieces named, by walk and rank;
    every other walk takes ``default``."""

    default: str = "fail"
    walks: tuple[tuple[Named, str], ...] = ()
    span: Span | None = field(default=None, compare=False)
    pieces: tuple[PieceRestart, ...] = ()

    def policy(self, walk: str) -> str:
        return next((p for n, p in self.walks if n.name == walk), self.default)

    def piece_policies(self, walk: str) -> tuple[tuple[int, str], ...]:
        """(rank, policy) of each of ``walk``'s pieces named on its own, by rank."""
        return tuple(sorted((p.rank, p.policy) for p in self.pieces if p.walk == walk))


@dataclass(frozen=True, slots=True)
class Batching:
    max_batch: int = 16
    capture: tuple[int, ...] = (1, 2, 4, 8, 16)
    backend: str = "auto"  # "auto" | "eager" | "cuda_graph" | "inductor" (CAPTURE_BACKENDS)
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ParamOverride:
    name: str
    value: int | float | str | bool
    span: Span = field(compare=False)  # the name
    value_span: Span | None = field(default=None, compare=False)
    # from M*'s speculative keys or `model_kwargs`: it sets the param when the model declares
    # one of that name (its nodes read it through `config`), and is ignored otherwise
    optional: bool = False


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
    # Ranks that run every node no group names (M*: rank 0, its driver); empty: wgc's format,
    # where every (walk, node) a flow can reach must be placed explicitly.
    default_ranks: tuple[int, ...] = ()
    # The `place:` (M*: `node_groups:`) key, where "add a group" diagnostics point.
    groups_span: Span | None = field(default=None, compare=False)
    # M*'s own keys that wgc reads but does not use (e.g. `kv_cache.cpu_offload_pages`), dotted.
    ignored_keys: tuple[str, ...] = ()
    sessions: Sessions = Sessions()  # `sessions:` (both formats)
    on_restart: Restarts = Restarts()  # `on_restart:` (wgc's format)
    # node -> the indices of the groups that name it: the rules and lowering ask for every
    # (walk, node) of the model, so a scan of every group made a 1,000-rank placement quadratic
    by_node: dict[str, tuple[int, ...]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[str, list[int]] = {}
        for i, g in enumerate(self.groups):
            for name in g.node_names:
                index.setdefault(name, []).append(i)
        object.__setattr__(self, "by_node", {k: tuple(v) for k, v in index.items()})

    @property
    def world_size(self) -> int:
        return len(self.devices)

    def placed(self, node: str) -> bool:
        """`placed(NODE)` in a flow: some group names ``node`` (defaults do not count)."""
        return node in self.by_node

    def host(self, rank: int) -> str:
        return dict(self.hosts).get(rank, "127.0.0.1")
